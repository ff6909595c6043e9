"""Train PPO on Breakout as a labml experiment: `python -m experiments.breakout --help`.

The last line printed is the path of the run's `summary.json`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labml import experiment, logger, monit, tracker
from labml.internal.lab import lab_singleton
from labml.logger import Text

from configs.cli import OneLineParser, config_from_overrides, fail, parse_config
from configs.live import LiveHyperParams
from configs.ppo import ConfigError, PPOConfig, config_fields
from dashboard.client import finish_app_tracking
from experiments.run.games_csv import GamesCsv
from game.atari import make_ale_env
from game.backends import game_specs, make_pool
from game.pool import PoolError
from ppo.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, write_json
from ppo.evaluation import record_training_video
from ppo.model import ActorCritic
from ppo.runs import checkpoint_path, find_run, release_run, running_pid
from ppo.seeding import derive_seeds
from ppo.stopping import GracefulStop
from ppo.trainer import NonFiniteLoss, Trainer, WorkerKeepsFailing, resolve_device

PRINTED_METRICS = ("score_mean_100", "policy_loss", "value_loss", "entropy", "approx_kl", "sps")


def app_url(dashboard: str | None) -> str | None:
    """labml's `app_url` for a dashboard: a bare http://host:port gets labml-app's track path."""
    if dashboard is None:
        return None
    base = dashboard.rstrip("/")
    return base if "/api/" in base else f"{base}/api/v1/default"


def resume_config(data_dir: Path, run_uuid: str, overrides: dict[str, Any]) -> tuple[PPOConfig, dict[str, Any]]:
    """The run's own config (plus allowed run-option overrides) and its last checkpoint."""
    run_dir = find_run(data_dir, run_uuid)
    if run_dir is None:
        raise ConfigError("resume", run_uuid, f"the uuid of a run under {data_dir}/ (none found there)")
    if (pid := running_pid(run_dir)) is not None and pid != os.getpid():
        raise ConfigError("resume", run_uuid, f"a run that is not running (process {pid} is still running it)")
    checkpoint = load_checkpoint(checkpoint_path(run_dir))
    saved = PPOConfig.from_dict(checkpoint["config"])
    run_options = {f.name for f in config_fields() if f.metadata["run_option"]}
    for name, value in overrides.items():
        if name not in run_options and value != getattr(saved, name):
            raise ConfigError(name, value, f"the resumed run's own value {getattr(saved, name)!r} (only run options such as --device may change on --resume)")
    config = config_from_overrides(overrides, saved)
    check_fits(checkpoint, config)
    release_run(run_dir)
    return config, checkpoint


def check_fits(checkpoint: dict[str, Any], config: PPOConfig) -> None:
    """Refuse, before anything starts, a checkpoint whose model cannot play this game."""
    n_actions = make_ale_env(config.game).action_space.n
    if checkpoint.get("n_actions") != n_actions:
        raise CheckpointError(f"the checkpoint's model has {checkpoint.get('n_actions')} actions; {config.game} has {n_actions}")
    try:
        ActorCritic(n_actions, config.frame_stack).load_state_dict(checkpoint["model"])
    except RuntimeError as e:
        raise CheckpointError(f"the checkpoint's model does not fit this config: {str(e).splitlines()[0]}") from None


def train(config: PPOConfig, resume: dict[str, Any] | None = None, run_uuid: str | None = None) -> tuple[Path, int]:
    """Run the experiment; returns the path of summary.json and the process exit code:
    0 when done, 128 + signal number when Ctrl-C/SIGTERM stopped it early (after a checkpoint),
    1 when a fault stopped it (the message says which; the last good state is checkpointed)."""
    device = resolve_device(config.device)
    # An absolute experiments_path puts runs under data_dir while labml's project root (found
    # through .labml.yaml) stays this repository, so each run records the code's git commit.
    lab_singleton().set_configurations({"experiments_path": str(Path(config.data_dir).resolve()),
                                        "app_url": app_url(config.dashboard), "app_open_browser": False})
    experiment.create(name=config.name, uuid=run_uuid, writers={"screen", "app"} if config.dashboard else {"screen"})
    live = LiveHyperParams(config, resume["live_values"] if resume else None)
    # Values that differ from the defaults are passed as labml's overrides, so the dashboard lists
    # them as this run's hyperparameters (live keys stay DynamicHyperParams, already set).
    defaults = PPOConfig().to_dict()
    changed = {k: v for k, v in config.to_dict().items() if v != defaults[k] and k not in live.params}
    experiment.configs(live.labml_configs(config), changed)
    run_dir = lab_singleton().experiments / config.name / experiment.get_uuid()
    seeds = derive_seeds(config.seed, config.n_envs)
    for name in PRINTED_METRICS:
        tracker.set_scalar(name, is_print=True)
    tracker.set_scalar("*", is_print=False)

    status, error, checkpoint_file, started = "crashed", None, None, time.perf_counter()
    stop = GracefulStop()
    with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
        trainer = Trainer(config, pool, seeds, device, live.values)
        trainer.on_event = lambda message: logger.log(message, Text.warning)
        if resume is not None:
            trainer.load_state_dict(resume)
        else:
            trainer.reset_envs()
        first_update, first_steps = trainer.update, trainer.env_steps
        games_csv = GamesCsv(run_dir / "games.csv", keep=trainer.games)

        def checkpoint() -> Path:
            path = checkpoint_path(run_dir)
            save_checkpoint(path, trainer.state_dict(live.bases()))
            return path

        try:
            with stop, experiment.start():
                tracker.set_global_step(trainer.env_steps)
                for _ in monit.loop(range(trainer.update, config.last_update)):
                    metrics = trainer.step()
                    games_csv.append(trainer.take_finished_games())
                    if config.eval_video_every and trainer.update % config.eval_video_every == 0:
                        metrics.update(record_training_video(trainer.model, config.to_dict(), run_dir, trainer.update, device))
                    tracker.save(trainer.env_steps, metrics)
                    if config.checkpoint_every and trainer.update % config.checkpoint_every == 0:
                        checkpoint_file = checkpoint()
                    if stop.requested:
                        break
                    if trainer.update % 10 == 0:
                        tracker.new_line()
                checkpoint_file = checkpoint()
                status = "interrupted" if stop.requested else "completed"
        except (NonFiniteLoss, WorkerKeepsFailing, PoolError) as fault:
            # The trainer holds the last good state (a failed update is rolled back): keep it.
            error = f"{type(fault).__name__}: {fault}"
            try:
                checkpoint_file = checkpoint()
            except CheckpointError as e:
                error += f"; {e}"
        except CheckpointError as e:
            error = str(e)
        finally:
            games_csv.append(trainer.take_finished_games())  # those of an update cut short, too
            games_csv.close()
            elapsed = time.perf_counter() - started
            existing = checkpoint_path(run_dir)
            summary = {
                "run_uuid": experiment.get_uuid(),
                "status": status,
                "error": error,
                "updates": trainer.update,
                "env_steps": trainer.env_steps,
                "score_mean_100": trainer.score_mean(),
                "games": trainer.games,
                "worker_restarts": trainer.worker_restarts,
                "sps": (trainer.env_steps - first_steps) / elapsed if trainer.update > first_update else None,
                "wall_time_s": elapsed,
                "checkpoint": str(checkpoint_file or existing) if (checkpoint_file or existing.exists()) else None,
                "run_dir": str(run_dir),
            }
            try:
                write_json(run_dir / "summary.json", summary)
            except OSError as e:
                print(f"\nerror: could not write {run_dir / 'summary.json'}: {e}", file=sys.stderr)
            if config.dashboard and not finish_app_tracking(timeout_s=30.0):
                print("\nwarning: the dashboard did not take the run's last updates within 30 s; "
                      "they are in the run folder", file=sys.stderr)
    if error is not None:
        print(f"\nerror: run {summary['run_uuid']} stopped at update {trainer.update}: {error.splitlines()[0]}", file=sys.stderr)
        if summary["checkpoint"]:
            print(f"the last good state is in {summary['checkpoint']}; resume with --resume {summary['run_uuid']}", file=sys.stderr)
        return run_dir / "summary.json", 1
    if stop.requested:
        print(f"\nstopped by {stop.requested} after update {trainer.update}; resume with --resume {summary['run_uuid']}", file=sys.stderr)
    return run_dir / "summary.json", stop.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    def extra(parser: OneLineParser) -> None:
        parser.add_argument("--resume", metavar="RUN_UUID", help="continue this run from its last checkpoint")

    config, args, overrides = parse_config(argv, "python -m experiments.breakout",
                                           "Train a PPO agent on Atari Breakout as a labml experiment.", extra)
    resume = None
    if args.resume is not None:
        try:
            config, resume = resume_config(Path(config.data_dir), args.resume, overrides)
        except (ConfigError, CheckpointError) as e:
            fail(str(e))
    try:
        summary, exit_code = train(config, resume, run_uuid=args.resume)
    except KeyboardInterrupt:  # a second Ctrl-C/SIGTERM: the workers are closed already
        print("\nstopped at once; the last periodic checkpoint is the one to resume from", file=sys.stderr)
        return 130
    except ConnectionError as e:  # Ray could not reach --ray-address
        fail(f"--ray-address {config.ray_address}: could not connect to a Ray cluster there ({str(e).splitlines()[0]})")
    # labml's progress line has no newline of its own; the path must be a line by itself.
    print(f"\n{summary}", flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
