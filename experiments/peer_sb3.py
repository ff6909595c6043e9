"""The peer for learning curves: Stable-Baselines3's PPO with the rl-baselines3-zoo Atari settings.

`python -m experiments.peer_sb3 --seed 1 --run-dir DIR` trains it on `BreakoutNoFrameskip-v4` and
writes DIR/games.csv in this project's format, so `experiments.curves` reads both sides alike.
Needs the `compare` extra: `pip install -e ".[compare]"`.

The settings are rl-zoo's `hyperparams/ppo.yml` entry `atari`: 8 envs, AtariWrapper (no-op
reset, frame skip 4 with max-pool, episodic life, FIRE reset, 84×84 grayscale, reward sign),
frame stack 4, n_steps 128, 4 epochs, batch 256, learning rate 2.5e-4 and clip range 0.1 both
annealed linearly to 0, vf_coef 0.5, ent_coef 0.01. The score is the full game: SB3's Monitor
sits inside the episodic-life wrapper, so it sees whole games, unclipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from configs.cli import OneLineParser, docstring_help, int_in
from configs.fields import MAX_ENV_STEPS
from configs.refusals import fail
from experiments.run.folders import GAMES, SUMMARY
from experiments.run.games_csv import GamesCsv
from experiments.run.stopping import GracefulStop

ENV_ID = "BreakoutNoFrameskip-v4"
ZOO_ATARI: dict[str, Any] = {"n_steps": 128, "n_epochs": 4, "batch_size": 256, "vf_coef": 0.5, "ent_coef": 0.01}
ZOO_N_ENVS = 8
ZOO_LEARNING_RATE = 2.5e-4  # lin_2.5e-4
ZOO_CLIP_RANGE = 0.1  # lin_0.1


def sb3_installed() -> bool:
    return importlib.util.find_spec("stable_baselines3") is not None


def linear(start: float) -> Any:
    # SB3 calls schedules with the progress remaining, 1 → 0 over learn()'s total_timesteps.
    return lambda progress_remaining: progress_remaining * start


def train(seed: int, total_env_steps: int, stop_after: int, run_dir: Path) -> int:
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecFrameStack

    from configs.files import write_json
    from ppo.devices import machine_fingerprint

    gym.register_envs(ale_py)

    class RecordGames(BaseCallback):
        """Each finished game into games.csv; stops learn() at the budget, not the schedule's end,
        or at the next step after a Ctrl-C or SIGTERM."""

        def __init__(self, games: GamesCsv, stop: GracefulStop) -> None:
            super().__init__()
            self.games = games
            self.stop = stop
            self.update = 1

        def _on_rollout_end(self) -> None:
            self.update += 1

        def _on_step(self) -> bool:
            rows = [(self.num_timesteps, self.update, float(info["episode"]["r"]), int(info["episode"]["l"]) // 4,
                     bool(info.get("TimeLimit.truncated", False)))
                    for info in self.locals["infos"] if "episode" in info]
            if rows:
                self.games.append(rows)
            return self.num_timesteps < stop_after and self.stop.requested is None

    env = VecFrameStack(make_atari_env(ENV_ID, n_envs=ZOO_N_ENVS, seed=seed), n_stack=4)
    model = PPO("CnnPolicy", env, learning_rate=linear(ZOO_LEARNING_RATE), clip_range=linear(ZOO_CLIP_RANGE),
                seed=seed, verbose=0, **ZOO_ATARI)
    # Without a logger of its own, learn() makes SB3's default one, which leaves an empty folder in
    # the temp dir at every run; the games and the summary below are the whole record.
    model.set_logger(Logger(folder=None, output_formats=[]))

    def write_summary(status: str) -> None:
        # Written first as `running`, so a run that never ends (killed, its machine lost) still names
        # its machine: SB3 too repeats a seed on one machine only.
        write_json(run_dir / SUMMARY, {"seed": seed, "status": status, "env_steps": model.num_timesteps,
                                              "total_env_steps": total_env_steps, "machines": [machine_fingerprint(model.device)]})

    run_dir.mkdir(parents=True, exist_ok=True)
    # Stopped like the project's runs: the first signal ends learn() at the next step with every
    # game so far recorded, a second at once; either way the summary says so and the exit status is
    # 128 + the signal, which `curves` reads as a stop, not a fault. (SB3 cannot resume a run.)
    with GracefulStop() as stop:
        write_summary("running")  # once a signal can no longer end the run without a summary
        with GamesCsv(run_dir / GAMES, keep=0) as games:
            try:
                model.learn(total_timesteps=total_env_steps, callback=RecordGames(games, stop))
            except KeyboardInterrupt:  # the second signal
                pass
        env.close()
    write_summary("interrupted" if stop.requested else "completed")
    return stop.exit_code


PROG = "python -m experiments.peer_sb3"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = OneLineParser(prog=prog, description=docstring_help(__doc__)[0])
    # numpy's legacy seeding, which SB3 uses, takes seeds below 2**32.
    parser.add_argument("--seed", type=int_in(0, 2**32 - 1), default=1, metavar="INT", help="seeds SB3 and its envs (default: 1)")
    parser.add_argument("--total-env-steps", type=int_in(1, MAX_ENV_STEPS), default=1_000_000, metavar="INT",
                        help="the schedule's length (default: 1000000)")
    parser.add_argument("--stop-after-env-steps", type=int_in(1, MAX_ENV_STEPS), default=None, metavar="INT",
                        help="end at this budget (default: the schedule's end)")
    parser.add_argument("--run-dir", required=True, metavar="DIR", help="where games.csv goes")
    args: argparse.Namespace = parser.parse_args(argv)
    if not sb3_installed():
        fail('stable-baselines3 is not installed: pip install -e ".[compare]"')
    stop_after = args.total_env_steps if args.stop_after_env_steps is None else args.stop_after_env_steps
    return train(args.seed, args.total_env_steps, stop_after, Path(args.run_dir))


if __name__ == "__main__":
    sys.exit(main())
