"""One training run, from its plan to the process exit code.

`TrainingRun(plan).run()` is what `python -m experiments.breakout` and every sweep trial do:
create the labml run (its folder, configs, dashboard), start the env pool, train update after
update with per-game records and periodic checkpoints, stop cleanly on Ctrl-C/SIGTERM or on a
fault, and always leave a `summary.json`: written as the run starts and at each periodic
checkpoint with status `running`, rewritten at the end with how it ended, so a run that never
reaches its end (a SIGKILL, a lost machine) still names its machines, its steps and its
checkpoint. Exit codes: 0 done; 128 + signal number when a signal stopped it early (after a
checkpoint); 1 when a fault stopped it (its last good state checkpointed), or the Ray cluster its
env actors ran on lost its head (the last whole update's state kept, one line saying how to go on).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from configs.files import write_json
from configs.ppo import accepted_live_values
from configs.urls import strip_userinfo
from experiments.run.console import Console, shown
from experiments.run.folders import RunFolder
from experiments.run.games_csv import GamesCsv
from experiments.run.labml import LabmlRun
from experiments.run.plan import LaunchPlan
from experiments.run.progress import ProgressLine
from experiments.run.report import cluster_lost_line, earlier_wall_time, next_commands, resume_command, start_lines, summary_line
from experiments.run.stopping import BEFORE_TRAINING, WITHIN_UPDATE, GracefulStop
from experiments.run.updates_csv import UpdatesCsv, read_updates
from game.vector import ClusterLost, PoolError, WorkerKeepsFailing, game_specs, make_pool
from ppo.checkpoint import Checkpoint, CheckpointError, save_checkpoint
from ppo.devices import machine_fingerprint, precision_label, resolve_device
from ppo.evaluation import record_training_video
from ppo.resume_point import thawed
from ppo.seeding import derive_seeds
from ppo.trainer import NonFiniteLoss, Trainer, UpdateAbandoned
from ray_setup.installed import ray_node_id
from ray_setup.nodes import this_node_name

FAULTS = (NonFiniteLoss, WorkerKeepsFailing, PoolError)  # stop the run; its last good state is kept


@dataclass(frozen=True)
class RunResult:
    summary_path: Path | None  # None: stopped before anything was written
    summary: dict[str, Any]
    exit_code: int


@dataclass
class RunState:
    """What changes while the run goes."""

    status: str = "crashed"  # until the run ends as it meant to
    error: str | None = None  # the fault that stopped it
    checkpoint: Path | None = None  # the last checkpoint this leg wrote
    checkpointed_update: int | None = None  # and its update
    lost: ClusterLost | None = None  # the Ray cluster of its env actors, lost with its head


@dataclass(frozen=True)
class Leg:
    """This session of the run, fixed once its training starts."""

    first_update: int  # where its training began, for its steps/s
    first_steps: int
    earlier_s: float  # the wall time of the run's earlier legs
    machines: list[dict[str, str]] = field(default_factory=list)  # every machine that trained the run


class TrainingRun:
    """The run `plan` describes: a new one, or a resume of `plan.run_uuid` from `plan.resume`."""

    def __init__(self, plan: LaunchPlan, console: Console | None = None) -> None:
        self.plan, self.config = plan, plan.config
        self.console = console or Console()
        self.say = self.console.say
        # Ctrl-C and SIGTERM are taken from the start, not only once training goes: a signal while
        # the workers start ends the run in one message, its workers closed (stopping.py).
        self.stop = GracefulStop(BEFORE_TRAINING, self.say)
        self.labml = LabmlRun(self.config, self.say)
        self.state = RunState()
        self.run_uuid = plan.run_uuid
        self._folder: RunFolder | None = None  # adopted as soon as labml makes (or reopens) it
        self.resumed = plan.resume.checkpoint if plan.resume is not None else None  # the trainer copies its tensors in
        self.started = time.perf_counter()

    def run(self) -> RunResult:
        with self.labml.console(), self.stop:  # labml's own messages as whole lines on stderr
            for note in self.plan.notes:
                self.say(note)
            if (folder := self.plan.folder) is not None and self.plan.lost_start:  # a start lost before its first checkpoint
                folder.remove_lost_start()
            elif folder is not None:  # the resume's checks are done: the last writer's files go
                folder.release()
            return self._run()

    def _run(self) -> RunResult:
        config, resume = self.config, self.resumed  # checked by the plan (plan.py) before this run was made
        device = resolve_device(config.device)
        self.run_uuid, run_dir = self.labml.create(self.plan.run_uuid, resume.live_values if resume else None,
                                                   self.plan.machine_choices, self.plan.label)
        self._folder = RunFolder.at(run_dir)
        self.say(start_lines(config, self.run_uuid, run_dir, precision_label(config.precision, device)))
        seeds = derive_seeds(config.seed, config.n_envs)
        try:
            pool = make_pool(config, game_specs(config, seeds.env_seeds))
        except ClusterLost as lost:
            return self._ended_at_start(lost)
        except Exception:
            # A signal to the whole process group reaches the workers (and the forkserver) while
            # they start, so their start can fail for that stop alone (a refused connection, a
            # pipe closed): the stop, not the failure it caused, is what happened.
            if self.stop.requested:
                return self._ended_at_start()
            raise
        with pool:
            if hasattr(pool, "placed_on"):  # Ray actors: where they were placed
                self.say(f"its {config.n_workers} Ray actor{'s' if config.n_workers > 1 else ''} run on {pool.placed_on()}")
            trainer = Trainer(config, pool, seeds, device, self.labml.live_values, on_event=self.say)
            trainer.should_stop = lambda: self.stop.requested is not None  # honoured between minibatches
            try:
                if resume is not None:
                    trainer.load_state_dict(resume)  # its games' states are sent to the actors
                    self.say(f"resumed at update {trainer.update:,} of {config.last_update:,}")
                else:
                    trainer.reset_envs()
            except ClusterLost as lost:
                return self._ended_at_start(lost)
            if self.stop.requested:
                return self._ended_at_start()
            self.stop.plan = WITHIN_UPDATE
            # A seed is the same run only on one machine (machine_fingerprint): curves tell paired
            # seeds from independent draws by the machines that trained a run.
            machines = thawed(resume.machines) if resume is not None else []  # this run's own, to add to
            if (machine := machine_fingerprint(device)) not in machines:
                machines.append(machine)
            leg = Leg(trainer.update, trainer.env_steps, earlier_wall_time(self.folder.summary) if resume else 0.0, machines)
            return self._train_then_close(trainer, leg, device)

    def _train_then_close(self, trainer: Trainer, leg: Leg, device: Any) -> RunResult:
        games = GamesCsv(self.folder.games_csv, keep=trainer.records.games)
        self.folder.publish(self.folder.games_csv)
        updates = UpdatesCsv(self.folder.updates_csv, keep=trainer.update)
        self.folder.publish(self.folder.updates_csv)
        self._summary(trainer, leg, status="running")
        try:
            self._train(trainer, leg, games, updates, device)
        except FAULTS as fault:
            # The trainer holds the last good state (a failed update is rolled back): keep it.
            self.state.error = f"{type(fault).__name__}: {fault}"
            try:
                self._checkpoint(trainer, leg)
            except CheckpointError as e:
                self.state.error += f"; {e}"
        except CheckpointError as e:
            self.state.error = str(e)
        except ClusterLost as lost:  # the games went with the cluster: the last checkpoint is the state kept
            self.state.status, self.state.error, self.state.lost = "interrupted", str(lost), lost
        except BaseException as e:  # unforeseen, or a second stop: still named in summary.json, then raised
            if isinstance(e, Exception):
                self.state.error = f"{type(e).__name__}: {e}"
            self._close(trainer, leg, games, updates, report=False)
            raise
        return self._close(trainer, leg, games, updates, report=True)

    def _close(self, trainer: Trainer, leg: Leg, games: GamesCsv, updates: UpdatesCsv, report: bool) -> RunResult:
        """The run's end, however it came: its records closed, its summary written, the report said
        (before labml sends the run's end: the run page's console ends with it), the dashboard told."""
        games.append(trainer.records.take_finished())  # those of an update cut short, too
        games.close()
        updates.close()
        summary = self._summary(trainer, leg)
        result = self._report(summary) if report else RunResult(self.folder.summary, summary, 1)
        self._finish_dashboard()
        return result

    def _train(self, trainer: Trainer, leg: Leg, games: GamesCsv, updates: UpdatesCsv, device: Any) -> None:
        config = self.config
        history = ((lambda: read_updates(self.folder.updates_csv)), trainer.update) if self.plan.resume is not None else None
        with ProgressLine(trainer.update, trainer.env_steps, config.last_update, self.started, self.console) as progress:
            self.labml.start(trainer.env_steps, history)
            rewind_point: Checkpoint | None = None  # the state before the update in progress
            for _ in self.labml.updates(trainer.update, config.last_update):
                if rewind_point is None or rewind_point.update != trainer.update:
                    rewind_point = self._state(trainer, leg)
                try:
                    metrics = trainer.iteration()
                except (UpdateAbandoned, ClusterLost) as cut:
                    # A stop between two minibatches, or the cluster lost while sampling: the model
                    # is as before the update; the games and RNGs are not (the rollout was sampled,
                    # or the games' states went with their actors). The run goes back to the
                    # update's start whole, taken while the games answered: its checkpoint is the
                    # state after the last completed update.
                    rewind_point = trainer.rewind(rewind_point)
                    if self.state.checkpointed_update != trainer.update:
                        self._write_checkpoint(rewind_point)
                    if isinstance(cut, ClusterLost):
                        raise
                    self.state.status = "interrupted"
                    return
                games.append(trainer.records.take_finished())
                if config.eval_video_every and trainer.update % config.eval_video_every == 0:
                    metrics.update(record_training_video(trainer.model, config.to_dict(), self.folder.path, trainer.update, device))
                self.labml.report(trainer.env_steps, metrics)
                updates.append(trainer.update, trainer.env_steps, metrics)
                progress.show(trainer.update, trainer.env_steps, trainer.records.score_mean())
                if config.checkpoint_every and trainer.update % config.checkpoint_every == 0:
                    rewind_point = self._checkpoint(trainer, leg)  # also the next update's starting state
                    self._summary(trainer, leg, status="running")  # names the checkpoint a killed run resumes from
                if self.stop.requested:
                    break
            if self.state.checkpointed_update != trainer.update:
                self._checkpoint(trainer, leg)
            self.state.status = "interrupted" if self.stop.requested else "completed"

    def _ended_at_start(self, lost: ClusterLost | None = None) -> RunResult:
        """A stop, or the cluster's head `lost`, before the first update of this session: nothing
        was trained, so nothing is written. A new run's folder does not exist yet (labml makes it
        when training starts); a resumed run's folder is as it was, its checkpoint the one to
        resume from again."""
        stop, resume = self.stop.requested, self.resumed
        update, env_steps = (resume.update, resume.env_steps) if resume is not None else (0, 0)
        if lost is not None:
            self.say(cluster_lost_line(lost.address, str(self.run_uuid), self._kept_update(), self.config, self._dashboard()))
        elif resume is None:
            self.say(f"stopped by {stop} before the first update: nothing was kept (no run folder was made)")
        else:
            self.say(f"stopped by {stop} before the first update of this session: the run is as it was, at update "
                     f"{update:,}; to go on: {resume_command(self.config, str(self.run_uuid), self._dashboard())}")
        summary = {"run_uuid": self.run_uuid, "status": "interrupted", "error": None if lost is None else str(lost),
                   "updates": update, "env_steps": env_steps, "kept": resume is not None}
        return RunResult(self.plan.folder.summary if self.plan.folder is not None and resume is not None else None, summary,
                         self.stop.exit_code if lost is None else 1)

    def _state(self, trainer: Trainer, leg: Leg) -> Checkpoint:
        """What a checkpoint holds now: the live values as the rule allows them (a refused one never
        reaches a param, and the trainer's last applied value stands in for anything else), and the
        dashboard URL without credentials (a resume never sends to it by itself)."""
        bases, _ = accepted_live_values(self.labml.live_bases(), fallback=trainer.live_in_use)
        state = trainer.state_dict(bases)
        config = state.config if state.config.get("dashboard") is None else {**state.config, "dashboard": strip_userinfo(state.config["dashboard"])}
        return dataclasses.replace(state, machines=leg.machines, machine_choices=dict(self.plan.machine_choices), config=config)

    def _checkpoint(self, trainer: Trainer, leg: Leg) -> Checkpoint:
        state = self._state(trainer, leg)
        self._write_checkpoint(state)
        return state

    def _write_checkpoint(self, state: Checkpoint) -> None:
        """The newest of the checkpoints kept, rotated atomically (`RunFolder.rotate_in`)."""
        try:
            self.state.checkpoint = self.folder.rotate_in(lambda path: save_checkpoint(path, state))
        except OSError as e:  # a rename or link of the rotation; the newest checkpoint is whole
            raise CheckpointError(f"could not rotate the checkpoints in {self.folder.newest_checkpoint.parent}: "
                                  f"{e.strerror or e}; checkpoint.pt is intact") from e
        self.state.checkpointed_update = state.update

    def _summary(self, trainer: Trainer, leg: Leg, status: str | None = None) -> dict[str, Any]:
        """Write summary.json: how the run ended (`status` None: the run's), or `running`."""
        elapsed = time.perf_counter() - self.started
        existing = self.folder.newest_checkpoint
        checkpoint = self.state.checkpoint or (existing if existing.exists() else None)
        summary = {
            "run_uuid": self.run_uuid,
            "status": status or self.state.status,
            "error": self.state.error,
            "updates": trainer.update,
            "env_steps": trainer.env_steps,
            # The annealing's length, and whether the run got to its end: a 1M schedule in batches
            # of 1,024 ends at 999,424 steps (976 updates), and that is its score "at 1M".
            "schedule_env_steps": self.config.schedule_env_steps,
            "schedule_ended": trainer.update >= self.config.n_updates,
            "score_mean_100": trainer.records.score_mean(),
            "games": trainer.records.games,
            "worker_restarts": trainer.worker_restarts,
            "precision": trainer.precision,  # what `auto` became here
            "machines": leg.machines,
            "node_id": ray_node_id(),  # the Ray node the trainer ran on (a sweep trial's, a member's), if any
            "node_name": this_node_name(),  # its name (ray_setup/nodes.py)
            "ray_nodes": getattr(trainer.pool, "nodes_used", lambda: None)(),  # Ray's node ids, for --backend ray
            "ray_node_names": getattr(trainer.pool, "node_names_used", lambda: None)(),  # their names, in the same order
            "sps": (trainer.env_steps - leg.first_steps) / elapsed if trainer.update > leg.first_update else None,
            "wall_time_s": elapsed,  # this leg's; the run's, all legs together:
            "run_wall_time_s": leg.earlier_s + elapsed,
            "leg_env_steps": trainer.env_steps - leg.first_steps,
            "checkpoint": str(checkpoint) if checkpoint else None,
            "run_dir": str(self.folder.path),
        }
        try:
            write_json(self.folder.summary, summary)
            self.folder.publish(self.folder.summary)
        except OSError as e:
            self.say(f"error: could not write {self.folder.summary}: {e}")
        return summary

    def _finish_dashboard(self) -> None:
        if not self.labml.finish(self.state.status, self.state.error):
            self.say(f"warning: the dashboard did not take the run's last updates within {self.config.dashboard_wait:g} s "
                     "(--dashboard-wait); they are in the run folder")

    def _report(self, summary: dict[str, Any]) -> RunResult:
        """What happened, in a few lines on stderr, and the commands to go on with."""
        error = self.state.error
        if self.state.lost is not None:  # the summary, then one line: what is kept and how to go on
            self.say(summary_line(summary, self.config.last_update, self.config.score_window))
            self.say(cluster_lost_line(self.state.lost.address, str(self.run_uuid), self._kept_update(), self.config, self._dashboard()))
            return RunResult(self.folder.summary, summary, 1)
        if error is not None:
            self.say(f"error: run {summary['run_uuid']} stopped at update {summary['updates']}: {error.splitlines()[0]}")
            if summary["checkpoint"]:
                self.say(f"the last good state is in {shown(summary['checkpoint'])}")
        elif self.stop.requested:
            self.say(f"stopped by {self.stop.requested} after update {summary['updates']}"
                     + (f"; its checkpoint: {shown(summary['checkpoint'])}" if summary["checkpoint"] else ""))
        self.say(summary_line(summary, self.config.last_update, self.config.score_window))
        for line in next_commands(summary, self.config, self._dashboard()):
            self.say(line)
        return RunResult(self.folder.summary, summary, 1 if error is not None else self.stop.exit_code)

    @property
    def folder(self) -> RunFolder:
        """The run's folder, once labml has made it (as the run starts)."""
        assert self._folder is not None, "the run's folder is made as the run starts"
        return self._folder

    def _dashboard(self) -> str | None:
        return strip_userinfo(self.config.dashboard) if self.config.dashboard else None

    def _kept_update(self) -> int | None:
        """The update a resume starts from: this session's last checkpoint, else the one it was
        resumed from (None: a new run with no checkpoint yet)."""
        if self.state.checkpoint is not None:
            return self.state.checkpointed_update
        return self.resumed.update if self.resumed is not None else None

    def resume_point(self) -> str:
        """After a second Ctrl-C: the checkpoint the run will resume from, and the command."""
        if (update := self._kept_update()) is None:
            return "no checkpoint was written yet: there is nothing to resume; start the run again"
        if self.state.checkpoint is not None:
            where = f"{shown(self.state.checkpoint)} (update {update})"
        else:  # none written this session: the resumed run's own
            assert self.plan.folder is not None
            where = f"{shown(self.plan.folder.newest_checkpoint)} (update {update}), the one it was resumed from"
        return f"it will resume from {where}:\n  {resume_command(self.config, str(self.run_uuid), self._dashboard())}"
