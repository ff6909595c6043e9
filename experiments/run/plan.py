"""A launch, planned before anything starts: the config, the checkpoint a resume goes on from, the
run's folder, what this machine chose, and the notes to print. Made once, with no side effects
(nothing deleted, nothing printed); `TrainingRun` then acts on it.

The layers, in order: the defaults (or, on a resume, the run's own config and checkpoint, read and
checked by `read_run_to_resume`), then the command line, then this machine's grouping of the games, merged
and validated once (configs/launch.py); last, what the config cannot say about this machine
(`check_can_start`). A new run's plan needs nothing of the learner until its config is accepted, so
a refused option answers before torch loads; a resume reads its checkpoint, with torch."""

from __future__ import annotations

import csv
import dataclasses
import os
import reprlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from configs.cli import game_check
from configs.fields import ConfigError
from configs.grouping import grouped_for_cores
from configs.launch import GROUPING, launch_config
from configs.machine import usable_cores
from configs.ppo import PPOConfig, accepted_live_values
from configs.urls import strip_userinfo
from experiments.run.appended_csv import torn_last_line
from experiments.run.folder_checks import UnsafeRunFolder, check_run_folder
from experiments.run.folders import checkpoint_paths, find_run, no_such_run, running_pid
from experiments.run.games_csv import read_games
from experiments.run.updates_csv import read_update_numbers
from game.atari import action_meanings, canonical_game, is_known_game, relaunch_refusal
from game.states import states_problem
from game.vector.private_ray import ray_version_problem

if TYPE_CHECKING:
    from ppo.checkpoint import Checkpoint, CheckpointError


@dataclass(frozen=True)
class LaunchPlan:
    config: PPOConfig
    resume: Checkpoint | None = None  # the checkpoint a resume goes on from, its values checked
    run_uuid: str | None = None  # a resume's; a new run's is labml's to choose
    run_dir: Path | None = None  # a resume's folder; a new run's is made when training starts
    machine_choices: Mapping[str, str] = field(default_factory=dict)  # field → why this machine chose it
    notes: tuple[str, ...] = ()  # what to tell the user before the run starts


class LaunchRefused(Exception):
    """The launch cannot start: one line naming the option, the file or the cell, and what is accepted."""


def plan_launch(overrides: Mapping[str, Any], resume_uuid: str | None) -> LaunchPlan:
    """The plan for a new run (`resume_uuid` None) or a resume; `ConfigError` or `LaunchRefused` otherwise."""
    if resume_uuid is not None:
        data_dir = Path(overrides.get("data_dir", PPOConfig().data_dir))
        if (run_dir := find_run(data_dir, resume_uuid)) is None:  # answered before the learner loads
            raise ConfigError("resume", resume_uuid, f"the uuid of a run under {data_dir}/ ({no_such_run(data_dir)})")
        return plan_resume(run_dir, resume_uuid, overrides)
    config, choices = launch_config(overrides, usable_cores(), game_exists=game_check(canonical_game))
    check_can_start(config)
    return LaunchPlan(config, machine_choices=choices)


def plan_resume(run_dir: Path, run_uuid: str, overrides: Mapping[str, Any]) -> LaunchPlan:
    """The plan that goes on with run `run_uuid` in `run_dir`: its own config and last good
    checkpoint (`read_run_to_resume`), with the changes its command line may make (configs/launch.py);
    `ConfigError` or `LaunchRefused` in one line otherwise."""
    from ppo.checkpoint import CheckpointError

    try:
        checkpoint, saved, notes = read_run_to_resume(run_dir, run_uuid)
    except CheckpointError as e:
        raise LaunchRefused(str(e)) from None
    config, _ = launch_config(overrides, None, saved=saved, game_exists=is_known_game)
    # A stop below the steps already taken cannot be kept (the run would claim to have ended before
    # where it is); one at them ends the resume at once, as a member of a population reaching its target.
    if config.stop_after_env_steps is not None and config.stop_after_env_steps < checkpoint.env_steps:
        raise ConfigError("stop_after_env_steps", config.stop_after_env_steps,
                          f"at least the run's own {checkpoint.env_steps} agent steps (update {checkpoint.update} of "
                          f"{config.n_updates}), or none, to resume it")
    # What the first leg's machine chose stays its choice while the resume keeps the grouping (the
    # dashboard's card says so, also to one that first hears of the run now); a regrouping is the user's.
    kept = (config.n_workers, config.envs_per_worker) == (saved.n_workers, saved.envs_per_worker)
    notes += regrouping_notes(saved, config)
    if saved.dashboard is not None and config.dashboard is None:
        notes.append(f"note: this run was sent to the dashboard {strip_userinfo(saved.dashboard)} before; "
                     "add --dashboard URL to send the resumed run to one")
    check_can_start(config, run_dir)
    return LaunchPlan(config, checkpoint, run_uuid, run_dir, checkpoint.machine_choices if kept else {}, tuple(notes))


def regrouping_notes(saved: PPOConfig, config: PPOConfig) -> list[str]:
    """A resume keeps its run's grouping unless told (it may be a choice: two processes a run, so
    that eight runs share a machine), and says what a regrouping changes, or suggests one where
    this machine's cores would group the games otherwise (`grouped_for_cores`, as for a new run)."""
    from ppo.rollout import acting_groups

    def same_batches(a: PPOConfig, b: PPOConfig) -> bool:
        return [envs for _, envs in acting_groups(a)] == [envs for _, envs in acting_groups(b)]
    effect = {True: "the network acts for them in the same batches, so nothing learned changes",
              False: "the network acts for them in other batches, so from here the run is not bit for bit the one "
                     "it would have been (a batch's size changes the last bits of its logits)"}
    suggestion = {True: "nothing learned would change", False: "the network would act for them in other batches, "
                                                               "so the run would not go on bit for bit"}
    if (config.n_workers, config.envs_per_worker) != (saved.n_workers, saved.envs_per_worker):
        return [f"note: the run's {saved.n_envs} games ran as {saved.n_workers} × {saved.envs_per_worker} and go on as "
                f"{config.n_workers} × {config.envs_per_worker}; {effect[same_batches(saved, config)]}"]
    cores = usable_cores()
    suited = grouped_for_cores(saved, cores)
    if config.backend == "local" and (suited.n_workers, suited.envs_per_worker) != (saved.n_workers, saved.envs_per_worker):
        return [f"note: the run's {saved.n_envs} games go on as {saved.n_workers} × {saved.envs_per_worker}, as they ran; for "
                f"this machine's {cores} usable cores, --n-workers {suited.n_workers} would group them {suited.n_workers} × "
                f"{suited.envs_per_worker} ({suggestion[same_batches(saved, suited)]})"]
    return []


# ---- what a resume reads from its run folder: the command line plays no part here ----

def load_last_good_checkpoint(paths: list[Path], notes: list[str]) -> Checkpoint:
    """The newest of a run's kept checkpoints (`paths`, newest first) that loads and holds finite parameters.

    A truncated or poisoned newest checkpoint does not lose the run: the one before it is used,
    with a warning (added to `notes`) naming what was skipped. When none is usable, the newest
    one's error is raised.
    """
    import torch

    from ppo.checkpoint import CheckpointError, read_checkpoint

    errors: list[CheckpointError] = []
    for path in paths:
        if errors and not path.exists():
            continue
        try:
            state = read_checkpoint(path)
            tensors = [t for t in state.model.values() if torch.is_tensor(t) and t.is_floating_point()]
            if not all(bool(torch.isfinite(t).all()) for t in tensors):
                raise CheckpointError(f"checkpoint {path} holds NaN/inf parameters")
        except CheckpointError as e:
            errors.append(e)
            continue
        if errors:
            notes.append(f"warning: {str(errors[0]).splitlines()[0]}; resuming from the one before it, {path.name} "
                         f"(update {state.update})")
        return state
    raise errors[0]


def checked_live_values(saved: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """A checkpoint's live values without the ones configs/ppo.py does not allow (each one noted):
    a poisoned value saved by an older version must not poison the resumed run too."""
    kept, refused = accepted_live_values(saved, fallback={})
    for name, problem in refused.items():
        notes.append(f"warning: ignoring the checkpoint's live value {name} = {saved[name]!r}: expected {problem}")
    return kept


UNRECORDED_MACHINE = {"cpu": "unrecorded (trained before runs recorded their machine)"}
MAX_MACHINES = 64
MAX_MACHINE_FIELD = 200  # characters of one value of a record


def checked_machines(saved: Any, notes: list[str]) -> list[dict[str, str]]:
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
    notes.append(f"warning: ignoring the checkpoint's machines = {reprlib.repr(saved)}: expected a list of at most "
                 f"{MAX_MACHINES} records of strings (of {MAX_MACHINE_FIELD} characters at most)")
    return [dict(UNRECORDED_MACHINE)]


def checked_machine_choices(saved: Any, notes: list[str]) -> dict[str, str]:
    """A checkpoint's record of the settings its machine chose, as grouping fields with short reasons
    (a checkpoint is data from a file: anything else is dropped, and noted); none where not recorded."""
    if saved is None:
        return {}
    if isinstance(saved, dict) and all(k in GROUPING and isinstance(v, str) and v.isprintable() and len(v) <= MAX_MACHINE_FIELD
                                       for k, v in saved.items()):
        return dict(saved)
    notes.append(f"warning: ignoring the checkpoint's machine_choices = {reprlib.repr(saved)}: expected "
                 f"{', '.join(sorted(GROUPING))} with reasons of {MAX_MACHINE_FIELD} printable characters at most")
    return {}


class RunToResume(NamedTuple):
    """What a resume goes on from, read from its run folder and checked: nothing here comes from the command line."""
    checkpoint: Checkpoint  # its last good checkpoint, its live values, machines and machine choices cleaned
    saved: PPOConfig  # the run's own config, as its checkpoint holds it
    notes: list[str]  # what was skipped or dropped on the way, to tell the user


def read_run_to_resume(run_dir: Path, run_uuid: str) -> RunToResume:
    """Run `run_uuid`'s folder, last good checkpoint and records, each checked before anything
    starts or is rewritten; `ConfigError` or `CheckpointError` in one line otherwise."""
    from ppo.checkpoint import CheckpointError

    # Its folder, before a byte of it is read (experiments/run/folder_checks.py).
    try:
        check_run_folder(run_dir)
    except UnsafeRunFolder as e:
        raise ConfigError("resume", run_uuid, f"a run folder of plain files and folders ({e}; nothing was read or written)") from None
    if (pid := running_pid(run_dir)) is not None and pid != os.getpid():
        raise ConfigError("resume", run_uuid, f"a run that is not running (process {pid} is still running it)")
    notes: list[str] = []
    checkpoint = load_last_good_checkpoint(checkpoint_paths(run_dir), notes)
    saved = PPOConfig.from_dict(checkpoint.config)
    # What would otherwise fail only once the workers started (a resume never changes the game or
    # the frame stack: configs/launch.py refuses it, so the run's own are the ones to check against).
    checkpoint.check_fits(len(action_meanings(saved.game)), saved.frame_stack, saved.game)
    checkpoint.check_random_states()
    if checkpoint.env_states is not None and (problem := states_problem(checkpoint.config, checkpoint.env_states, saved.n_envs)):
        raise CheckpointError(f"the checkpoint's {problem}; nothing was started")
    notes += check_records(run_dir, run_uuid, checkpoint)  # the resume keeps their rows up to the checkpoint
    checked = dataclasses.replace(checkpoint, live_values=checked_live_values(checkpoint.live_values, notes),
                                  machines=checked_machines(checkpoint.machines, notes),
                                  machine_choices=checked_machine_choices(checkpoint.machine_choices, notes))
    return RunToResume(checked, saved, notes)


def check_records(run_dir: Path, run_uuid: str, checkpoint: Checkpoint) -> list[str]:
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
    counted_games, counted_update = checkpoint.games, checkpoint.update
    reach = {games_path: (len(games) >= counted_games, len(games), f"the {counted_games!r} games its checkpoint counts"),
             updates_path: (bool(updates) and updates[-1] >= counted_update, len(updates), f"update {counted_update!r}, its checkpoint's")}
    notes = []
    for path, line in torn.items():
        reached, whole_rows, what = reach[path]
        if not reached:
            raise ConfigError("resume", run_uuid, f"a run whose records reach its checkpoint ({path}:{line} was cut "
                                                  f"short in the middle of an append, and the {whole_rows} whole rows "
                                                  f"before it do not reach {what})")
        notes.append(f"note: {path}:{line} was cut short in the middle of an append when the run ended; "
                     "it comes after the checkpoint, and the resume drops it")
    return notes


def check_can_start(config: PPOConfig, run_dir: Path | None = None) -> None:
    """What the config cannot say about this machine, checked before any process starts or any
    file is written: the device exists and has the precision asked for, a Ray backend's Ray is
    recent enough, and the run's folder can be created and written. `ConfigError` (one line naming the option) otherwise."""
    from ppo.devices import resolve_device, resolve_precision  # torch, once the options are accepted

    resolve_precision(config.precision, resolve_device(config.device))  # a missing GPU; bf16 where the hardware has none
    if config.backend == "ray" and (problem := ray_version_problem()) is not None:
        raise ConfigError("backend", config.backend, problem)  # one that cannot keep a private Ray private
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
