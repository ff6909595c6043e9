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

import csv
import os
import reprlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import torch
from labml import experiment, monit, tracker
from labml.internal.experiment import experiment_singleton
from labml.internal.lab import lab_singleton
from labml.internal.monitor import monitor_singleton

from configs.cli import config_from_overrides
from configs.live import LiveHyperParams
from configs.ppo import ConfigError, PPOConfig, config_fields, grouped_for_cores, live_ranges, live_value_problem, usable_cores
from dashboard.client import finish_app_tracking
from experiments.run.appended_csv import torn_last_line
from experiments.run.console import say
from experiments.run.folders import checkpoint_path, checkpoint_paths, find_run, publish, release_run, rotate_in, running_pid
from experiments.run.games_csv import GamesCsv, read_games
from experiments.run.progress import ProgressLine, labml_console_above, quiet_labml_banner
from experiments.run.report import next_commands, resume_command, start_lines, summary_line
from experiments.run.stopping import GracefulStop
from experiments.run.updates_csv import UpdatesCsv, read_update_numbers
from game.atari import action_meanings, is_known_game, relaunch_refusal
from game.vector import PoolError, WorkerKeepsFailing, game_specs, make_pool
from ppo.checkpoint import CheckpointError, check_random_states, load_checkpoint, save_checkpoint, write_json
from ppo.checkpoint import check_fits as check_model_fits
from ppo.devices import machine_fingerprint, precision_label, precision_of, resolve_device, resolve_precision
from ppo.evaluation import record_training_video
from ppo.seeding import derive_seeds
from ppo.trainer import NonFiniteLoss, Trainer, UpdateAbandoned, acting_groups

PRINTED_METRICS = ("score_mean_100", "policy_loss", "value_loss", "entropy", "approx_kl", "sps")
FAULTS = (NonFiniteLoss, WorkerKeepsFailing, PoolError)  # stop the run; its last good state is kept


def app_url(dashboard: str | None) -> str | None:
    """labml's `app_url` for a dashboard: a bare http://host:port gets labml-app's track path."""
    if dashboard is None:
        return None
    base = dashboard.rstrip("/")
    return base if "/api/" in base else f"{base}/api/v1/default"


def strip_userinfo(url: str) -> str:
    """`url` without its user/password part: `https://user:token@host/repo.git` → `https://host/repo.git`,
    `user@host:repo.git` (git's scp form) → `host:repo.git`. Anything else is returned as it is.

    Applied to every remote URL before labml (run.yaml, the dashboard) or a checkpoint records it:
    a token in a git remote or a dashboard URL must never land in a run folder.
    """
    if "://" in url:
        parts = urlsplit(url)
        if "@" in parts.netloc:
            return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        return url
    head, at, rest = url.rpartition("@")
    if at and "/" not in head and ":" in rest:  # scp form: [userinfo@]host:path
        return rest
    return url


def run_title(config: PPOConfig) -> str:
    """The run's name in labml and on the dashboard: its game, and the `--name` the user gave
    (`Pong`, `Pong · lr-sweep`); the default name is only the folder."""
    default_name = PPOConfig().name
    return config.game if config.name == default_name else f"{config.game} · {config.name}"


def check_can_start(config: PPOConfig, run_dir: Path | None = None) -> None:
    """What the config cannot say about this machine, checked before any process starts or any
    file is written: the device exists and has the precision asked for, and the run's folder can be
    created and written. `ConfigError` (one line naming the option) otherwise."""
    resolve_precision(config.precision, resolve_device(config.device))  # a missing GPU; bf16 where the hardware has none
    if config.fire_on_reset and (refusal := relaunch_refusal(config.game, config.relaunch)):
        raise ConfigError("relaunch", config.relaunch, refusal)  # a game without RIGHT, refused here rather than in every worker
    data_dir = config.data_dir
    targets = [Path(data_dir) / config.name] + ([run_dir, run_dir / "checkpoints"] if run_dir is not None else [])
    for target in targets:
        existing = target
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError("data_dir", data_dir, f"a folder ({existing} is not a folder)")
        try:  # a real write, not os.access: root, read-only mounts and ACLs all answer truthfully
            os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=existing))
        except OSError as e:
            raise ConfigError("data_dir", data_dir, f"a folder this user can write to ({existing}: {e.strerror})") from None


def load_last_good_checkpoint(run_dir: Path) -> dict[str, Any]:
    """The newest of the run's kept checkpoints that loads and holds finite parameters.

    A truncated or poisoned newest checkpoint does not lose the run: the one before it is used,
    with a warning naming what was skipped. When none is usable, the newest one's error is raised.
    """
    errors: list[CheckpointError] = []
    for path in checkpoint_paths(run_dir):
        if errors and not path.exists():
            continue
        try:
            state = load_checkpoint(path)
            tensors = [t for t in state["model"].values() if torch.is_tensor(t) and t.is_floating_point()]
            if not all(bool(torch.isfinite(t).all()) for t in tensors):
                raise CheckpointError(f"checkpoint {path} holds NaN/inf parameters")
        except CheckpointError as e:
            errors.append(e)
            continue
        if errors:
            say(f"warning: {str(errors[0]).splitlines()[0]}; resuming from the one before it, {path.name} "
                f"(update {state.get('update')})")
        return state
    raise errors[0]


def checked_live_values(saved: dict[str, Any] | None) -> dict[str, Any]:
    """A checkpoint's live values without the ones configs/ppo.py does not allow (each reported):
    a poisoned value saved by an older version must not poison the resumed run too."""
    kept = {}
    for name, value in (saved or {}).items():
        problem = live_value_problem(name, value) if name in live_ranges() else "a live hyperparameter"
        if problem is None:
            kept[name] = value
        else:
            say(f"warning: ignoring the checkpoint's live value {name} = {value!r}: expected {problem}")
    return kept


UNRECORDED_MACHINE = {"cpu": "unrecorded (trained before runs recorded their machine)"}
MAX_MACHINES = 64
MAX_MACHINE_FIELD = 200  # characters of one value of a record


def checked_machines(saved: Any) -> list[dict[str, str]]:
    """A checkpoint's list of the machines that trained it, as plain string-to-string records (a
    checkpoint is data from a file: anything else in it is dropped, and reported). A checkpoint
    written before runs recorded their machines gives one `UNRECORDED_MACHINE`."""
    def is_record(m: Any) -> bool:
        return isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str) and len(v) <= MAX_MACHINE_FIELD
                                           for k, v in m.items())
    if saved is None:
        return [dict(UNRECORDED_MACHINE)]
    if isinstance(saved, list) and len(saved) <= MAX_MACHINES and all(map(is_record, saved)):
        return saved
    say(f"warning: ignoring the checkpoint's machines = {reprlib.repr(saved)}: expected a list of at most "
        f"{MAX_MACHINES} records of strings (of {MAX_MACHINE_FIELD} characters at most)")
    return [dict(UNRECORDED_MACHINE)]


def resume_config(data_dir: Path, run_uuid: str, overrides: dict[str, Any]) -> tuple[PPOConfig, dict[str, Any]]:
    """The run's own config (plus allowed run-option overrides) and its last good checkpoint.

    `--dashboard` is not taken from the checkpoint: a resume sends to the dashboard its own command
    line names, or to none, so a run never reports somewhere its launcher did not ask for.
    """
    run_dir = find_run(data_dir, run_uuid)
    if run_dir is None:
        raise ConfigError("resume", run_uuid, f"the uuid of a run under {data_dir}/ (none found there)")
    if (pid := running_pid(run_dir)) is not None and pid != os.getpid():
        raise ConfigError("resume", run_uuid, f"a run that is not running (process {pid} is still running it)")
    checkpoint = load_last_good_checkpoint(run_dir)
    check_records(run_dir, run_uuid, checkpoint)
    saved = PPOConfig.from_dict(checkpoint["config"])
    run_options = {f.name for f in config_fields() if f.metadata["run_option"]}
    for name, value in overrides.items():
        if name not in run_options | GROUPING and value != getattr(saved, name):
            raise ConfigError(name, value, f"the resumed run's own value {getattr(saved, name)!r} (only run options such as "
                                           "--device, and the grouping of its games, may change on --resume)")
    config = config_from_overrides({"dashboard": None, **regrouped(saved, overrides)}, saved, is_known_game)
    say_regrouping(saved, config)
    if saved.dashboard is not None and config.dashboard is None:
        say(f"note: this run was sent to the dashboard {strip_userinfo(saved.dashboard)} before; "
            "add --dashboard URL to send the resumed run to one")
    check_fits(checkpoint, config)
    check_random_states(checkpoint)
    checkpoint["live_values"] = checked_live_values(checkpoint.get("live_values"))
    check_can_start(config, run_dir)
    release_run(run_dir)
    return config, checkpoint


# How the games are spread over worker processes: a speed setting of the machine (configs/ppo.py,
# grouped_for_cores), that a resume may change (--n-workers, --envs-per-worker) as long as the
# games stay the same: a run moved to a machine with other cores need not keep 8 processes on 2. Each game's
# state is saved on its own, so a resume in another grouping is exact whenever the network acts for
# the same games at once (ppo/trainer.py, acting_groups; tests/test_faults.py).
GROUPING = {"n_workers", "envs_per_worker"}


def regrouped(saved: PPOConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` with the grouping completed: a resume keeps the run's number of games, so one of
    --n-workers and --envs-per-worker decides the other; `ConfigError` for a grouping of another number."""
    games = saved.n_envs
    chosen = {name: overrides[name] for name in sorted(GROUPING & overrides.keys())}
    if len(chosen) == 1:
        (name, value), = chosen.items()
        if games % value:
            raise ConfigError(name, value, f"a divisor of the resumed run's {games} games (a resume can regroup its games, "
                                           "not change their number)")
        other = (GROUPING - {name}).pop()
        return {**overrides, other: games // value}
    if len(chosen) == 2 and overrides["n_workers"] * overrides["envs_per_worker"] != games:
        raise ConfigError("n_workers", f"{overrides['n_workers']} with --envs-per-worker {overrides['envs_per_worker']}",
                          f"n_workers × envs_per_worker = the resumed run's {games} games (a resume can regroup its games, "
                          "not change their number)")
    return overrides


def say_regrouping(saved: PPOConfig, config: PPOConfig) -> None:
    """A resume keeps its run's grouping unless told (it may be a choice: two processes a run, so
    that eight runs share a machine), and says what a regrouping changes, or suggests one where
    this machine's cores would group the games otherwise (`grouped_for_cores`, as for a new run)."""
    def same_batches(a: PPOConfig, b: PPOConfig) -> bool:
        return [envs for _, envs in acting_groups(a)] == [envs for _, envs in acting_groups(b)]
    effect = {True: "the network acts for them in the same batches, so nothing learned changes",
              False: "the network acts for them in other batches, so from here the run is not bit for bit the one "
                     "it would have been (a batch's size changes the last bits of its logits)"}
    suggestion = {True: "nothing learned would change", False: "the network would act for them in other batches, "
                                                               "so the run would not go on bit for bit"}
    if (config.n_workers, config.envs_per_worker) != (saved.n_workers, saved.envs_per_worker):
        say(f"note: the run's {saved.n_envs} games ran as {saved.n_workers} × {saved.envs_per_worker} and go on as "
            f"{config.n_workers} × {config.envs_per_worker}; {effect[same_batches(saved, config)]}")
        return
    cores = usable_cores()
    suited = grouped_for_cores(saved, cores)
    if config.backend == "local" and (suited.n_workers, suited.envs_per_worker) != (saved.n_workers, saved.envs_per_worker):
        say(f"note: the run's {saved.n_envs} games go on as {saved.n_workers} × {saved.envs_per_worker}, as they ran; for "
            f"this machine's {cores} usable cores, --n-workers {suited.n_workers} would group them {suited.n_workers} × "
            f"{suited.envs_per_worker} ({suggestion[same_batches(saved, suited)]})")


def check_records(run_dir: Path, run_uuid: str, checkpoint: dict[str, Any]) -> None:
    """Refuse, before anything starts or is rewritten, a run whose games.csv or updates.csv cannot
    be read (the resume keeps their rows up to the checkpoint, so it reads them first).

    A last line without its line end is an append the run's end cut short (experiments/run/appended_csv.py).
    The resume drops it, as it drops every row after the checkpoint, when the whole rows before it
    reach the checkpoint: then the cut row came after it. When they do not, rows the checkpoint
    counts are missing, and the resume refuses rather than leave a gap."""
    games_path, updates_path = run_dir / "games.csv", run_dir / "updates.csv"
    try:
        games = read_games(games_path) if games_path.exists() else []
        updates = read_update_numbers(updates_path) if updates_path.exists() else []
        torn = {path: line for path in (games_path, updates_path)
                if path.exists() and (line := torn_last_line(path.read_bytes())) is not None}
    except (ValueError, OSError, csv.Error) as e:
        raise ConfigError("resume", run_uuid, f"a run whose records can be read ({e})") from None
    counted_games, counted_update = checkpoint.get("games"), checkpoint.get("update")
    reach = {games_path: (isinstance(counted_games, int) and len(games) >= counted_games,
                          len(games), f"the {counted_games!r} games its checkpoint counts"),
             updates_path: (isinstance(counted_update, int) and bool(updates) and updates[-1] >= counted_update,
                            len(updates), f"update {counted_update!r}, its checkpoint's")}
    for path, line in torn.items():
        reached, whole_rows, what = reach[path]
        if not reached:
            raise ConfigError("resume", run_uuid, f"a run whose records reach its checkpoint ({path}:{line} was cut "
                                                  f"short in the middle of an append, and the {whole_rows} whole rows "
                                                  f"before it do not reach {what})")
        say(f"note: {path}:{line} was cut short in the middle of an append when the run ended; "
            "it comes after the checkpoint, and the resume drops it")


def check_fits(checkpoint: dict[str, Any], config: PPOConfig) -> None:
    """Refuse, before anything starts, a checkpoint whose model cannot play this game."""
    check_model_fits(checkpoint, len(action_meanings(config.game)), config.frame_stack, config.game)


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
        self.checkpointed_update: int | None = None  # the update of that checkpoint
        self.run_dir = Path()  # known once labml has created the run
        self.started = time.perf_counter()
        self.first_update = self.first_steps = 0  # where this session's training began (for its steps/s)
        # Every machine that trained this run: a seed is the same run only on one machine
        # (machine_fingerprint), so curves can tell paired seeds from independent draws.
        self.machines: list[dict[str, str]] = checked_machines(resume.get("machines")) if resume is not None else []

    def run(self) -> RunResult:
        with labml_console_above():  # labml's own messages as whole lines on stderr (progress.py)
            return self._run()

    def _run(self) -> RunResult:
        config = self.config
        check_can_start(config)  # before labml writes anything or a worker starts
        device = resolve_device(config.device)
        if (machine := machine_fingerprint(device)) not in self.machines:
            self.machines.append(machine)
        live = self._start_labml()
        self.run_uuid = experiment.get_uuid()
        say(start_lines(config, self.run_uuid, self.run_dir, precision_label(config.precision, device)))
        seeds = derive_seeds(config.seed, config.n_envs)
        with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
            trainer = Trainer(config, pool, seeds, device, live.values, on_event=say)
            trainer.should_stop = lambda: self.stop.requested is not None  # honoured between minibatches
            if self.resume is not None:
                trainer.load_state_dict(self.resume)
                say(f"resumed at update {trainer.update:,} of {config.last_update:,}")
            else:
                trainer.reset_envs()
            self.first_update, self.first_steps = trainer.update, trainer.env_steps
            games = GamesCsv(self.run_dir / "games.csv", keep=trainer.games)
            publish(self.run_dir / "games.csv")
            updates = UpdatesCsv(self.run_dir / "updates.csv", keep=trainer.update)
            publish(self.run_dir / "updates.csv")
            self._summary(trainer, status="running")
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
                raise
            finally:
                games.append(trainer.take_finished_games())  # those of an update cut short, too
                games.close()
                updates.close()
                summary = self._summary(trainer)
                self._finish_dashboard()
        return self._report(summary)

    def _start_labml(self) -> LiveHyperParams:
        config = self.config
        # An absolute experiments_path puts runs under data_dir while labml's project root (found
        # through .labml.yaml) stays this repository, so each run records the code's git commit.
        lab_singleton().set_configurations({"experiments_path": str(Path(config.data_dir).resolve()),
                                            "app_url": app_url(config.dashboard), "app_open_browser": False})
        experiment.create(name=config.name, uuid=self.run_uuid, writers={"screen", "app"} if config.dashboard else {"screen"})
        # labml read the project's git remotes in create(); run.yaml and the dashboard get them at
        # start(). A credential in a remote URL (https://user:token@host/…) is dropped in between.
        run = experiment_singleton().run
        run.repo_remotes = [strip_userinfo(url) for url in run.repo_remotes]
        # The folder is `name` (create() has fixed the run's paths); the name the dashboard lists
        # (and run.yaml records) says which game the run plays.
        run.name = run_title(config)
        live = LiveHyperParams(config, self.resume["live_values"] if self.resume else None)
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
        with self.stop, progress:
            experiment.start()  # its end is reported by _finish_dashboard, with the run's real status
            tracker.set_global_step(trainer.env_steps)
            boundary: dict[str, Any] | None = None  # the state before the update in progress
            for _ in monit.loop(range(trainer.update, config.last_update)):
                if boundary is None or boundary["update"] != trainer.update:
                    boundary = self._state(trainer, live)
                try:
                    metrics = trainer.iteration()
                except UpdateAbandoned:
                    # A stop between two minibatches: the model is as before the update; the games
                    # and RNGs are not (the rollout was sampled). The run goes back to the update's
                    # start whole, so its checkpoint is the state after the last completed update.
                    self._rewind(trainer, boundary)
                    if self.checkpointed_update != trainer.update:
                        self._write_checkpoint(boundary)
                    self.status = "interrupted"
                    return
                games.append(trainer.take_finished_games())
                if config.eval_video_every and trainer.update % config.eval_video_every == 0:
                    metrics.update(record_training_video(trainer.model, config.to_dict(), self.run_dir, trainer.update, device))
                tracker.save(trainer.env_steps, metrics)
                updates.append(trainer.update, trainer.env_steps, metrics)
                progress.show(trainer.update, trainer.env_steps, trainer.score_mean())
                if config.checkpoint_every and trainer.update % config.checkpoint_every == 0:
                    boundary = self._checkpoint(trainer, live)  # also the next update's starting state
                    self._summary(trainer, status="running")  # names the checkpoint a killed run resumes from
                if self.stop.requested:
                    break
            if self.checkpointed_update != trainer.update:
                self._checkpoint(trainer, live)
            self.status = "interrupted" if self.stop.requested else "completed"

    def _state(self, trainer: Trainer, live: LiveHyperParams) -> dict[str, Any]:
        """What a checkpoint holds now. Only values the trainer accepts are saved as live values,
        and the dashboard URL without credentials (a resume never sends to it by itself)."""
        in_use = trainer.live_in_use or {}
        bases = {k: (v if live_value_problem(k, v) is None else in_use.get(k, getattr(self.config, k)))
                 for k, v in live.bases().items()}
        state = {**trainer.state_dict(bases), "machines": self.machines}
        if state["config"].get("dashboard") is not None:
            state["config"] = {**state["config"], "dashboard": strip_userinfo(state["config"]["dashboard"])}
        return state

    @staticmethod
    def _rewind(trainer: Trainer, boundary: dict[str, Any]) -> None:
        """Put the trainer's counters back to `boundary` after an abandoned update (its model and
        optimizer were rolled back by the trainer), so the summary and games.csv match the checkpoint."""
        trainer.update, trainer.env_steps, trainer.games = boundary["update"], boundary["env_steps"], boundary["games"]
        trainer.scores.clear()
        trainer.scores.extend(boundary["scores"])
        trainer.lengths.clear()
        trainer.lengths.extend(boundary["lengths"])
        trainer.finished_games = [g for g in trainer.finished_games if g.update <= boundary["update"]]
        boundary["model"] = trainer.model.state_dict()  # the rolled-back tensors, not the ones before
        boundary["optimizer"] = trainer.optimizer.state_dict()

    def _checkpoint(self, trainer: Trainer, live: LiveHyperParams) -> dict[str, Any]:
        state = self._state(trainer, live)
        self._write_checkpoint(state)
        return state

    def _write_checkpoint(self, state: dict[str, Any]) -> None:
        """The newest of the last KEEP_CHECKPOINTS checkpoints, rotated atomically (folders.rotate_in)."""
        try:
            self.checkpoint_file = rotate_in(self.run_dir, lambda path: save_checkpoint(path, state))
        except OSError as e:  # a rename or link of the rotation; the newest checkpoint is whole
            raise CheckpointError(f"could not rotate the checkpoints in {checkpoint_path(self.run_dir).parent}: "
                                  f"{e.strerror or e}; checkpoint.pt is intact") from e
        self.checkpointed_update = state["update"]

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
            "score_mean_100": trainer.score_mean(),
            "games": trainer.games,
            "worker_restarts": trainer.worker_restarts,
            "precision": precision_of(trainer.model.compute_dtype),  # what `auto` became here
            "machines": self.machines,
            "sps": (trainer.env_steps - self.first_steps) / elapsed if trainer.update > self.first_update else None,
            "wall_time_s": elapsed,
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
        if self.config.dashboard and not finish_app_tracking(timeout_s=30.0):
            say("warning: the dashboard did not take the run's last updates within 30 s; "
                "they are in the run folder")

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
            where = f"{checkpoint_path(self.run_dir)} (update {self.resume['update']}), the one it was resumed from"
        else:
            return "no checkpoint was written yet: there is nothing to resume; start the run again"
        return f"it will resume from {where}:\n  {resume_command(self.config, str(self.run_uuid), self._dashboard())}"
