"""One training run as one object, from labml's set-up to the process exit code.

`TrainingRun(config).run()` is what `python -m experiments.breakout` and every sweep trial do:
set labml up (run folder, configs, dashboard), start the env pool, train update after update
with per-game records and periodic checkpoints, stop cleanly on Ctrl-C/SIGTERM or on a fault,
and always leave a `summary.json`. Exit codes: 0 done; 128 + signal number when a signal stopped
it early (after a checkpoint); 1 when a fault stopped it (its last good state checkpointed).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labml import experiment, logger, monit, tracker
from labml.internal.lab import lab_singleton
from labml.logger import Text

from configs.cli import config_from_overrides
from configs.live import LiveHyperParams
from configs.ppo import ConfigError, PPOConfig, config_fields
from dashboard.client import finish_app_tracking
from experiments.run.folders import checkpoint_path, find_run, release_run, running_pid
from experiments.run.games_csv import GamesCsv
from experiments.run.stopping import GracefulStop
from game.atari import is_known_game, make_ale_env
from game.vector import PoolError, WorkerKeepsFailing, game_specs, make_pool
from ppo.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, write_json
from ppo.checkpoint import check_fits as check_model_fits
from ppo.devices import resolve_device
from ppo.evaluation import record_training_video
from ppo.seeding import derive_seeds
from ppo.trainer import NonFiniteLoss, Trainer

PRINTED_METRICS = ("score_mean_100", "policy_loss", "value_loss", "entropy", "approx_kl", "sps")
FAULTS = (NonFiniteLoss, WorkerKeepsFailing, PoolError)  # stop the run; its last good state is kept


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
    config = config_from_overrides(overrides, saved, is_known_game)
    check_fits(checkpoint, config)
    release_run(run_dir)
    return config, checkpoint


def check_fits(checkpoint: dict[str, Any], config: PPOConfig) -> None:
    """Refuse, before anything starts, a checkpoint whose model cannot play this game."""
    env = make_ale_env(config.game)
    n_actions = int(env.action_space.n)  # type: ignore[attr-defined]  # ALE's spaces are Discrete
    env.close()
    check_model_fits(checkpoint, n_actions, config.frame_stack, config.game)


@dataclass(frozen=True)
class RunResult:
    summary_path: Path
    summary: dict[str, Any]
    exit_code: int


class TrainingRun:
    """A labml run of `config`: a new one, or `resume` (a checkpoint) continued as run `run_uuid`."""

    def __init__(self, config: PPOConfig, resume: dict[str, Any] | None = None, run_uuid: str | None = None) -> None:
        self.config, self.resume, self.run_uuid = config, resume, run_uuid
        self.stop = GracefulStop()
        self.status = "crashed"  # until the loop ends normally
        self.error: str | None = None  # the fault that stopped the run
        self.checkpoint_file: Path | None = None  # the last checkpoint this session wrote
        self.run_dir = Path()  # known once labml has created the run
        self.started = time.perf_counter()

    def run(self) -> RunResult:
        config = self.config
        device = resolve_device(config.device)
        live = self._start_labml()
        seeds = derive_seeds(config.seed, config.n_envs)
        with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
            trainer = Trainer(config, pool, seeds, device, live.values, on_event=lambda message: logger.log(message, Text.warning))
            if self.resume is not None:
                trainer.load_state_dict(self.resume)
            else:
                trainer.reset_envs()
            first_update, first_steps = trainer.update, trainer.env_steps
            games = GamesCsv(self.run_dir / "games.csv", keep=trainer.games)
            try:
                self._train(trainer, live, games, device)
            except FAULTS as fault:
                # The trainer holds the last good state (a failed update is rolled back): keep it.
                self.error = f"{type(fault).__name__}: {fault}"
                try:
                    self._checkpoint(trainer, live)
                except CheckpointError as e:
                    self.error += f"; {e}"
            except CheckpointError as e:
                self.error = str(e)
            finally:
                games.append(trainer.take_finished_games())  # those of an update cut short, too
                games.close()
                summary = self._summary(trainer, first_update, first_steps)
                self._finish_dashboard()
        return self._report(summary)

    def _start_labml(self) -> LiveHyperParams:
        config = self.config
        # An absolute experiments_path puts runs under data_dir while labml's project root (found
        # through .labml.yaml) stays this repository, so each run records the code's git commit.
        lab_singleton().set_configurations({"experiments_path": str(Path(config.data_dir).resolve()),
                                            "app_url": app_url(config.dashboard), "app_open_browser": False})
        experiment.create(name=config.name, uuid=self.run_uuid, writers={"screen", "app"} if config.dashboard else {"screen"})
        live = LiveHyperParams(config, self.resume["live_values"] if self.resume else None)
        # Values that differ from the defaults are passed as labml's overrides, so the dashboard lists
        # them as this run's hyperparameters (live keys stay DynamicHyperParams, already set).
        defaults = PPOConfig().to_dict()
        changed = {k: v for k, v in config.to_dict().items() if v != defaults[k] and k not in live.params}
        experiment.configs(live.labml_configs(config), changed)
        self.run_dir = lab_singleton().experiments / config.name / experiment.get_uuid()
        for name in PRINTED_METRICS:
            tracker.set_scalar(name, is_print=True)
        tracker.set_scalar("*", is_print=False)
        return live

    def _train(self, trainer: Trainer, live: LiveHyperParams, games: GamesCsv, device: Any) -> None:
        config = self.config
        with self.stop, experiment.start():
            tracker.set_global_step(trainer.env_steps)
            for _ in monit.loop(range(trainer.update, config.last_update)):
                metrics = trainer.iteration()
                games.append(trainer.take_finished_games())
                if config.eval_video_every and trainer.update % config.eval_video_every == 0:
                    metrics.update(record_training_video(trainer.model, config.to_dict(), self.run_dir, trainer.update, device))
                tracker.save(trainer.env_steps, metrics)
                if config.checkpoint_every and trainer.update % config.checkpoint_every == 0:
                    self._checkpoint(trainer, live)
                if self.stop.requested:
                    break
                if trainer.update % 10 == 0:
                    tracker.new_line()
            self._checkpoint(trainer, live)
            self.status = "interrupted" if self.stop.requested else "completed"

    def _checkpoint(self, trainer: Trainer, live: LiveHyperParams) -> None:
        path = checkpoint_path(self.run_dir)
        save_checkpoint(path, trainer.state_dict(live.bases()))
        self.checkpoint_file = path

    def _summary(self, trainer: Trainer, first_update: int, first_steps: int) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.started
        existing = checkpoint_path(self.run_dir)
        checkpoint = self.checkpoint_file or (existing if existing.exists() else None)
        summary = {
            "run_uuid": experiment.get_uuid(),
            "status": self.status,
            "error": self.error,
            "updates": trainer.update,
            "env_steps": trainer.env_steps,
            "score_mean_100": trainer.score_mean(),
            "games": trainer.games,
            "worker_restarts": trainer.worker_restarts,
            "sps": (trainer.env_steps - first_steps) / elapsed if trainer.update > first_update else None,
            "wall_time_s": elapsed,
            "checkpoint": str(checkpoint) if checkpoint else None,
            "run_dir": str(self.run_dir),
        }
        try:
            write_json(self.run_dir / "summary.json", summary)
        except OSError as e:
            print(f"\nerror: could not write {self.run_dir / 'summary.json'}: {e}", file=sys.stderr)
        return summary

    def _finish_dashboard(self) -> None:
        if self.config.dashboard and not finish_app_tracking(timeout_s=30.0):
            print("\nwarning: the dashboard did not take the run's last updates within 30 s; "
                  "they are in the run folder", file=sys.stderr)

    def _report(self, summary: dict[str, Any]) -> RunResult:
        path = self.run_dir / "summary.json"
        if self.error is not None:
            print(f"\nerror: run {summary['run_uuid']} stopped at update {summary['updates']}: {self.error.splitlines()[0]}", file=sys.stderr)
            if summary["checkpoint"]:
                print(f"the last good state is in {summary['checkpoint']}; resume with --resume {summary['run_uuid']}", file=sys.stderr)
            return RunResult(path, summary, 1)
        if self.stop.requested:
            print(f"\nstopped by {self.stop.requested} after update {summary['updates']}; resume with --resume {summary['run_uuid']}",
                  file=sys.stderr)
        return RunResult(path, summary, self.stop.exit_code)
