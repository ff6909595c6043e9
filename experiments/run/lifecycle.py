"""One training run as one object, from labml's set-up to the process exit code.

`TrainingRun(config).run()` is what `python -m experiments.breakout` and every sweep trial do:
set labml up (run folder, configs, dashboard), start the env pool, train update after update
with per-game records and periodic checkpoints, stop cleanly on Ctrl-C/SIGTERM or on a fault,
and always leave a `summary.json`: written as the run starts and at each periodic checkpoint with
status `running`, rewritten at the end with how it ended, so a run that never reaches its end (a
SIGKILL, a lost machine) still names its machines, its steps and its checkpoint. Exit codes: 0
done; 128 + signal number when a signal stopped it early (after a checkpoint); 1 when a fault
stopped it (its last good state checkpointed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labml import experiment, monit, tracker
from labml.internal.experiment import experiment_singleton
from labml.internal.lab import lab_singleton
from labml.internal.monitor import monitor_singleton

from configs.live import LiveHyperParams
from configs.ppo import PPOConfig, accepted_live_values
from dashboard.client import finish_app_tracking
from dashboard.labml_client import use_dashboard
from experiments.run.console import say
from experiments.run.credentials import app_url, strip_userinfo
from experiments.run.dashboard_history import send_history
from experiments.run.folders import checkpoint_path, publish, rotate_in
from experiments.run.games_csv import GamesCsv
from experiments.run.progress import ProgressLine, labml_console_above, quiet_labml_banner
from experiments.run.report import earlier_wall_time, next_commands, resume_command, start_lines, summary_line
from experiments.run.resume import checked_machines
from experiments.run.stopping import AFTER_UPDATE, BEFORE_TRAINING, GracefulStop
from experiments.run.updates_csv import UpdatesCsv
from game.vector import PoolError, WorkerKeepsFailing, game_specs, make_pool
from ppo.checkpoint import Checkpoint, CheckpointError, save_checkpoint, write_json
from ppo.devices import machine_fingerprint, precision_label, precision_of, resolve_device
from ppo.evaluation import record_training_video
from ppo.seeding import derive_seeds
from ppo.trainer import NonFiniteLoss, Trainer, UpdateAbandoned

PRINTED_METRICS = ("score_mean_100", "policy_loss", "value_loss", "entropy", "approx_kl", "sps")
FAULTS = (NonFiniteLoss, WorkerKeepsFailing, PoolError)  # stop the run; its last good state is kept


def run_title(config: PPOConfig) -> str:
    """The run's name in labml and on the dashboard: its game, and the `--name` the user gave
    (`Pong`, `Pong · lr-sweep`); the default name is only the folder."""
    default_name = PPOConfig().name
    return config.game if config.name == default_name else f"{config.game} · {config.name}"


@dataclass(frozen=True)
class RunResult:
    summary_path: Path | None  # None: stopped before anything was written
    summary: dict[str, Any]
    exit_code: int


class TrainingRun:
    """A labml run of `config`: a new one, or `resume` (a checkpoint) continued as run `run_uuid`."""

    def __init__(self, config: PPOConfig, resume: Checkpoint | None = None, run_uuid: str | None = None) -> None:
        self.config, self.resume, self.run_uuid = config, resume, run_uuid
        self.stop = GracefulStop()
        self.status = "crashed"  # until the loop ends normally
        self.error: str | None = None  # the fault that stopped the run
        self.checkpoint_file: Path | None = None  # the last checkpoint this session wrote
        self.checkpointed_update: int | None = None  # the update of that checkpoint
        self.run_dir = Path()  # known once labml has created the run
        self.started = time.perf_counter()
        self.first_update = self.first_steps = 0  # where this session's training began (for its steps/s)
        self.earlier_s = 0.0  # the wall time of the run's earlier legs
        # Every machine that trained this run: a seed is the same run only on one machine
        # (machine_fingerprint), so curves can tell paired seeds from independent draws.
        self.machines: list[dict[str, str]] = checked_machines(resume.machines) if resume is not None else []

    def run(self) -> RunResult:
        # Ctrl-C and SIGTERM are taken from the start, not only once training goes: a signal while
        # the workers start ends the run in one message, its workers closed (stopping.py).
        self.stop.plan = BEFORE_TRAINING
        with labml_console_above(), self.stop:  # labml's own messages as whole lines on stderr (progress.py)
            return self._run()

    def _run(self) -> RunResult:
        config = self.config  # checked by experiments/run/preflight.py before this run was made
        device = resolve_device(config.device)
        if (machine := machine_fingerprint(device)) not in self.machines:
            self.machines.append(machine)
        live = self._start_labml()
        self.run_uuid = experiment.get_uuid()
        say(start_lines(config, self.run_uuid, self.run_dir, precision_label(config.precision, device)))
        seeds = derive_seeds(config.seed, config.n_envs)
        try:
            pool = make_pool(config, game_specs(config, seeds.env_seeds))
        except Exception:
            # A signal to the whole process group reaches the workers (and the forkserver) while
            # they start, so their start can fail for that stop alone (a refused connection, a
            # pipe closed): the stop, not the failure it caused, is what happened.
            if self.stop.requested:
                return self._stopped_at_start()
            raise
        with pool:
            trainer = Trainer(config, pool, seeds, device, live.values, on_event=say)
            trainer.should_stop = lambda: self.stop.requested is not None  # honoured between minibatches
            if self.resume is not None:
                trainer.load_state_dict(self.resume)
                say(f"resumed at update {trainer.update:,} of {config.last_update:,}")
            else:
                trainer.reset_envs()
            if self.stop.requested:
                return self._stopped_at_start()
            self.stop.plan = AFTER_UPDATE
            self.first_update, self.first_steps = trainer.update, trainer.env_steps
            self.earlier_s = earlier_wall_time(self.run_dir / "summary.json") if self.resume is not None else 0.0
            games = GamesCsv(self.run_dir / "games.csv", keep=trainer.records.games)
            publish(self.run_dir / "games.csv")
            updates = UpdatesCsv(self.run_dir / "updates.csv", keep=trainer.update)
            publish(self.run_dir / "updates.csv")
            self._summary(trainer, status="running")
            unforeseen = False
            try:
                self._train(trainer, live, games, updates, device)
            except FAULTS as fault:
                # The trainer holds the last good state (a failed update is rolled back): keep it.
                self.error = f"{type(fault).__name__}: {fault}"
                try:
                    self._checkpoint(trainer, live)
                except CheckpointError as e:
                    self.error += f"; {e}"
            except CheckpointError as e:
                self.error = str(e)
            except Exception as e:  # unforeseen: still named in summary.json, then raised
                self.error = f"{type(e).__name__}: {e}"
                unforeseen = True
                raise
            finally:
                games.append(trainer.records.take_finished())  # those of an update cut short, too
                games.close()
                updates.close()
                summary = self._summary(trainer)
                # Reported before labml sends the run's end, so the run page's console ends with it.
                result = None if unforeseen else self._report(summary)
                self._finish_dashboard()
        assert result is not None
        return result

    def _stopped_at_start(self) -> RunResult:
        """A stop before the first update of this session: nothing was trained, so nothing is
        written. A new run's folder does not exist yet (labml makes it when training starts); a
        resumed run's folder is as it was, its checkpoint the one to resume from again."""
        stop = self.stop.requested
        update, env_steps = (self.resume.update, self.resume.env_steps) if self.resume is not None else (0, 0)
        if self.resume is None:
            say(f"stopped by {stop} before the first update: nothing was kept (no run folder was made)")
        else:
            say(f"stopped by {stop} before the first update of this session: the run is as it was, at update "
                f"{update:,}; to go on: {resume_command(self.config, str(self.run_uuid), self._dashboard())}")
        summary = {"run_uuid": self.run_uuid, "status": "interrupted", "error": None, "updates": update,
                   "env_steps": env_steps, "kept": self.resume is not None}
        path = self.run_dir / "summary.json" if self.resume is not None else None
        return RunResult(path, summary, self.stop.exit_code)

    def _start_labml(self) -> LiveHyperParams:
        config = self.config
        # An absolute experiments_path puts runs under data_dir while labml's project root (found
        # through .labml.yaml) stays this repository, so each run records the code's git commit.
        # labml gets the dashboard's URL without credentials (they go as HTTP basic authentication)
        # and a sender that survives whatever the dashboard answers (dashboard/labml_client.py).
        labml_app_url = use_dashboard(url) if (url := app_url(config.dashboard)) else None
        lab_singleton().set_configurations({"experiments_path": str(Path(config.data_dir).resolve()),
                                            "app_url": labml_app_url, "app_open_browser": False})
        experiment.create(name=config.name, uuid=self.run_uuid, writers={"screen", "app"} if config.dashboard else {"screen"})
        # labml read the project's git remotes in create(); run.yaml and the dashboard get them at
        # start(). A credential in a remote URL (https://user:token@host/…) is dropped in between.
        run = experiment_singleton().run
        run.repo_remotes = [strip_userinfo(url) for url in run.repo_remotes]
        # The folder is `name` (create() has fixed the run's paths); the name the dashboard lists
        # (and run.yaml records) says which game the run plays.
        run.name = run_title(config)
        live = LiveHyperParams(config, self.resume.live_values if self.resume else None)
        # Values that differ from the defaults are passed as labml's overrides, so the dashboard lists
        # them as this run's explicitly set hyperparameters. A live key goes in as its
        # DynamicHyperParam (already holding the value), so it stays changeable.
        labml_configs = live.labml_configs(config)
        changed = {k: labml_configs[k] for k in config.non_defaults()}
        if config.dashboard is not None:
            changed["dashboard"] = strip_userinfo(config.dashboard)
        experiment.configs(labml_configs, changed)
        self.run_dir = lab_singleton().experiments / config.name / experiment.get_uuid()
        for name in PRINTED_METRICS:
            tracker.set_scalar(name, is_print=True)
        tracker.set_scalar("*", is_print=False)
        return live

    def _train(self, trainer: Trainer, live: LiveHyperParams, games: GamesCsv, updates: UpdatesCsv, device: Any) -> None:
        config = self.config
        # The terminal shows our progress line (experiments/run/progress.py), not labml's: labml's
        # monitor draws its line (and its screen writer's metrics) only when not silent. The metrics
        # go to the dashboard through tracker.save, and to the run folder as updates.csv.
        monitor_singleton().silent()
        quiet_labml_banner()
        progress = ProgressLine(trainer.update, trainer.env_steps, config.last_update, self.started)
        with progress:
            if config.dashboard and self.resume is not None:  # its earlier updates first (dashboard_history.py)
                send_history(config.dashboard, str(self.run_uuid), self.run_dir / "updates.csv", trainer.update)
            experiment.start()  # its end is reported by _finish_dashboard, with the run's real status
            tracker.set_global_step(trainer.env_steps)
            boundary: Checkpoint | None = None  # the state before the update in progress
            for _ in monit.loop(range(trainer.update, config.last_update)):
                if boundary is None or boundary.update != trainer.update:
                    boundary = self._state(trainer, live)
                try:
                    metrics = trainer.iteration()
                except UpdateAbandoned:
                    # A stop between two minibatches: the model is as before the update; the games
                    # and RNGs are not (the rollout was sampled). The run goes back to the update's
                    # start whole, so its checkpoint is the state after the last completed update.
                    boundary = trainer.rewind(boundary)
                    if self.checkpointed_update != trainer.update:
                        self._write_checkpoint(boundary)
                    self.status = "interrupted"
                    return
                games.append(trainer.records.take_finished())
                if config.eval_video_every and trainer.update % config.eval_video_every == 0:
                    metrics.update(record_training_video(trainer.model, config.to_dict(), self.run_dir, trainer.update, device))
                tracker.save(trainer.env_steps, metrics)
                updates.append(trainer.update, trainer.env_steps, metrics)
                progress.show(trainer.update, trainer.env_steps, trainer.records.score_mean())
                if config.checkpoint_every and trainer.update % config.checkpoint_every == 0:
                    boundary = self._checkpoint(trainer, live)  # also the next update's starting state
                    self._summary(trainer, status="running")  # names the checkpoint a killed run resumes from
                if self.stop.requested:
                    break
            if self.checkpointed_update != trainer.update:
                self._checkpoint(trainer, live)
            self.status = "interrupted" if self.stop.requested else "completed"

    def _state(self, trainer: Trainer, live: LiveHyperParams) -> Checkpoint:
        """What a checkpoint holds now. Only values the trainer accepts are saved as live values,
        and the dashboard URL without credentials (a resume never sends to it by itself)."""
        bases, _ = accepted_live_values(live.bases(), fallback=trainer.live_in_use)
        state = trainer.state_dict(bases)
        state.machines = self.machines
        if state.config.get("dashboard") is not None:
            state.config = {**state.config, "dashboard": strip_userinfo(state.config["dashboard"])}
        return state

    def _checkpoint(self, trainer: Trainer, live: LiveHyperParams) -> Checkpoint:
        state = self._state(trainer, live)
        self._write_checkpoint(state)
        return state

    def _write_checkpoint(self, state: Checkpoint) -> None:
        """The newest of the last KEEP_CHECKPOINTS checkpoints, rotated atomically (folders.rotate_in)."""
        try:
            self.checkpoint_file = rotate_in(self.run_dir, lambda path: save_checkpoint(path, state))
        except OSError as e:  # a rename or link of the rotation; the newest checkpoint is whole
            raise CheckpointError(f"could not rotate the checkpoints in {checkpoint_path(self.run_dir).parent}: "
                                  f"{e.strerror or e}; checkpoint.pt is intact") from e
        self.checkpointed_update = state.update

    def _summary(self, trainer: Trainer, status: str | None = None) -> dict[str, Any]:
        """Write summary.json: how the run ended (`status` None: `self.status`), or `running`."""
        elapsed = time.perf_counter() - self.started
        existing = checkpoint_path(self.run_dir)
        checkpoint = self.checkpoint_file or (existing if existing.exists() else None)
        summary = {
            "run_uuid": experiment.get_uuid(),
            "status": status or self.status,
            "error": self.error,
            "updates": trainer.update,
            "env_steps": trainer.env_steps,
            # The annealing's length, and whether the run got to its end: a 1M schedule in batches
            # of 1,024 ends at 999,424 steps (976 updates), and that is its score "at 1M".
            "schedule_env_steps": self.config.schedule_env_steps,
            "schedule_ended": trainer.update >= self.config.n_updates,
            "score_mean_100": trainer.records.score_mean(),
            "games": trainer.records.games,
            "worker_restarts": trainer.worker_restarts,
            "precision": precision_of(trainer.model.compute_dtype),  # what `auto` became here
            "machines": self.machines,
            "sps": (trainer.env_steps - self.first_steps) / elapsed if trainer.update > self.first_update else None,
            "wall_time_s": elapsed,  # this leg's; the run's, all legs together:
            "run_wall_time_s": self.earlier_s + elapsed,
            "leg_env_steps": trainer.env_steps - self.first_steps,
            "checkpoint": str(checkpoint) if checkpoint else None,
            "run_dir": str(self.run_dir),
        }
        try:
            write_json(self.run_dir / "summary.json", summary)
            publish(self.run_dir / "summary.json")
        except OSError as e:
            say(f"error: could not write {self.run_dir / 'summary.json'}: {e}")
        return summary

    def _finish_dashboard(self) -> None:
        # labml's `with experiment.start():` would call every run that leaves the block without an
        # exception "completed", a Ctrl-C'd one included; its run_log.jsonl and the dashboard get the
        # status summary.json has instead (interrupted, completed, or crashed with the fault).
        experiment_singleton().finish(self.status, self.error)
        if self.config.dashboard and not finish_app_tracking(timeout_s=self.config.dashboard_wait):
            say(f"warning: the dashboard did not take the run's last updates within {self.config.dashboard_wait:g} s "
                "(--dashboard-wait); they are in the run folder")

    def _report(self, summary: dict[str, Any]) -> RunResult:
        """What happened, in a few lines on stderr, and the commands to go on with."""
        path = self.run_dir / "summary.json"
        if self.error is not None:
            say(f"error: run {summary['run_uuid']} stopped at update {summary['updates']}: {self.error.splitlines()[0]}")
            if summary["checkpoint"]:
                say(f"the last good state is in {summary['checkpoint']}")
        elif self.stop.requested:
            say(f"stopped by {self.stop.requested} after update {summary['updates']}"
                + (f"; its checkpoint: {summary['checkpoint']}" if summary["checkpoint"] else ""))
        say(summary_line(summary, self.config.last_update, self.config.score_window))
        for line in next_commands(summary, self.config, self._dashboard()):
            say(line)
        return RunResult(path, summary, 1 if self.error is not None else self.stop.exit_code)

    def _dashboard(self) -> str | None:
        return strip_userinfo(self.config.dashboard) if self.config.dashboard else None

    def resume_point(self) -> str:
        """After a second Ctrl-C: the checkpoint the run will resume from, and the command."""
        if self.checkpoint_file is not None:
            where = f"{self.checkpoint_file} (update {self.checkpointed_update})"
        elif self.resume is not None:
            where = f"{checkpoint_path(self.run_dir)} (update {self.resume.update}), the one it was resumed from"
        else:
            return "no checkpoint was written yet: there is nothing to resume; start the run again"
        return f"it will resume from {where}:\n  {resume_command(self.config, str(self.run_uuid), self._dashboard())}"
