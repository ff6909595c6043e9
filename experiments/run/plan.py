"""A launch, planned before anything starts: the config, the checkpoint a resume goes on from, the
run's folder, what this machine chose, and the notes to print. Made once, with no side effects
(nothing deleted, nothing printed), and immutable all the way down (a frozen config, a frozen
resume point, read-only by its types); `TrainingRun` then acts on it. `plan_launch` is
the one way a run is planned: a training run, a resume, a sweep's trial and a population's member.

The layers, in order: the defaults (or, on a resume, the run's own config and checkpoint, read once
and checked whole by `ppo.resume_point.read_resume_point`), then the command line, then this
machine's grouping of the games, merged and validated once (configs/launch.py); last, what the
config cannot say about this machine (`check_can_start`). A resume reads each part of its folder
once, in the order that keeps reading safe: the folder itself (`RunFolder.check`, before a byte of
it is read) and its owner, its last good checkpoint, then its records. A new run's plan, and a
resume of a run without a checkpoint, need nothing of the learner: a refusal answers before torch
loads; so does a resume's `--stop-after-env-steps` below the steps its checkpoints count, which
their counts answer first (`refuse_stop_below_steps`), before the checkpoint is read whole."""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from configs.fields import ConfigError
from configs.launch import grouped_for_cores, launch_config
from configs.machine import usable_cores
from configs.ppo import PPOConfig
from configs.urls import strip_userinfo
from experiments.run import games_csv, updates_csv
from experiments.run.folders import CHECKPOINTS, RunFolder, read_record
from experiments.run.safe_files import UnsafeRunFolder, open_to_read
from game.atari import is_known_game, is_spelled_as_known, relaunch_refusal
from ppo.checkpoint_counts import read_counts
from ray_setup.installed import ray_version_problem

if TYPE_CHECKING:
    from ppo.resume_point import ResumePoint


@dataclass(frozen=True)
class LaunchPlan:
    config: PPOConfig
    resume: ResumePoint | None = None  # the checkpoint a resume goes on from, checked whole
    run_uuid: str | None = None  # a resume's, a trial's or a member's; a new run's is labml's to choose
    folder: RunFolder | None = None  # a resume's folder, released as it starts; a new run's is made when training starts
    lost_start: bool = False  # `folder` holds a start lost before its first checkpoint: cleared as the run starts
    machine_choices: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # field → why this machine chose it
    notes: tuple[str, ...] = ()  # what to tell the user before the run starts
    label: str | None = None  # what the run is part of (a sweep's trial, a population's member), shown beside it

    @property
    def run_dir(self) -> Path | None:
        return self.folder.path if self.folder is not None and not self.lost_start else None


class LaunchRefused(Exception):
    """The launch cannot start: one line naming the option, the file or the cell, and what is accepted."""


def plan_launch(overrides: Mapping[str, Any], resume: str | None = None, run_uuid: str | None = None,
                label: str | None = None) -> LaunchPlan:
    """The plan for a new run, for `--resume RUN` (its uuid, or the first 8 or more of its digits),
    or for a run under a uuid chosen beforehand (`run_uuid`: a sweep's trial, a population's member,
    which `label` names on the dashboard), resumed when its folder holds a checkpoint and started
    afresh otherwise; `ConfigError` or `LaunchRefused` in one line otherwise."""
    data_dir = Path(overrides.get("data_dir", PPOConfig().data_dir))
    option, name = ("resume", resume) if resume is not None else ("run_uuid", run_uuid)
    folder = RunFolder.named(data_dir, name, option) if name is not None else None
    if resume is not None and folder is None:
        raise ConfigError("resume", resume, f"the uuid of a run under {data_dir}/ ({RunFolder.none_named(data_dir)})")
    checkpoints = [folder.path / checkpoint for checkpoint in CHECKPOINTS] if folder is not None else []
    resumable = any(path.exists() for path in checkpoints)
    if folder is not None and resume is not None and not resumable:  # answered before the learner loads
        raise ConfigError("resume", resume, f"a run with a checkpoint to resume from ({folder.path} has none: it "
                                            "stopped before its first checkpoint, so there is nothing to go on from)")
    if folder is not None:
        # Checked whole before a byte of it is read (a resume's), or anything in it is removed (a
        # lost start's, cleared as the run starts): nothing is read or removed through a link.
        try:
            owner = folder.check()
        except UnsafeRunFolder as e:
            if not resumable:
                raise LaunchRefused(str(e)) from None
            raise ConfigError("resume", folder.uuid, f"a run folder of plain files and folders ({e}; nothing was read or written)") from None
        if resumable:
            if owner is not None and owner != os.getpid():
                raise ConfigError("resume", folder.uuid, f"a run that is not running (process {owner} is still running it)")
            return plan_resume(folder, overrides, checkpoints, label)
    cores = usable_cores() if run_uuid is None else None  # a trial's games are grouped by its sweep or population
    config, choices = launch_config(overrides, cores, game_exists=is_spelled_as_known)
    check_can_start(config)
    return LaunchPlan(config, run_uuid=run_uuid, folder=folder, lost_start=folder is not None,
                      machine_choices=MappingProxyType(choices), label=label)


def plan_resume(folder: RunFolder, overrides: Mapping[str, Any], checkpoints: list[Path], label: str | None) -> LaunchPlan:
    """The plan that goes on with the run in `folder` (checked by `plan_launch`: plain files and
    folders, no other process running it) from the last good of its `checkpoints`, each part of the
    folder read once, in the order that keeps reading safe: its checkpoint, checked whole with the
    run's own config (ppo.resume_point.read_resume_point), the changes its command line may make to
    that config (configs/launch.py), then its records (`read_record`); `ConfigError` or
    `LaunchRefused` in one line otherwise."""
    if overrides.get("stop_after_env_steps") is not None:  # answered before torch loads where the checkpoints tell
        refuse_stop_below_steps(overrides, checkpoints)
    from ppo.checkpoint import CheckpointError
    from ppo.resume_point import read_resume_point

    try:
        point = read_resume_point(checkpoints)
    except CheckpointError as e:
        raise LaunchRefused(str(e)) from None
    checkpoint, saved = point.checkpoint, point.config
    config, _ = launch_config(overrides, None, saved=saved, game_exists=is_known_game,
                              reached=(checkpoint.update, checkpoint.env_steps))  # a stop below them: refused
    notes = list(point.notes)
    # The run keeps the records' rows up to the checkpoint, so one that cannot be read is refused
    # here. A last line without its line end is an append the run's end cut short: dropped, as every
    # row after the checkpoint is, when the whole rows before it reach the checkpoint (the cut row
    # came after it); refused when they do not, rather than leave a gap of rows the checkpoint counts.
    games, update = checkpoint.games, checkpoint.update
    for path, record, reached, what in (
            (folder.games_csv, games_csv, lambda rows: len(rows) >= games, f"the {games!r} games its checkpoint counts"),
            (folder.updates_csv, updates_csv, lambda rows: bool(rows) and rows[-1][2][0] >= update, f"update {update!r}, its checkpoint's")):
        try:
            rows, torn = read_record(path, record.CELLS, record.ROW) if path.exists() else ([], None)
        except (ValueError, OSError, csv.Error) as e:
            raise ConfigError("resume", folder.uuid, f"a run whose records can be read ({e})") from None
        if torn is not None and not reached(rows):
            raise ConfigError("resume", folder.uuid, f"a run whose records reach its checkpoint ({path}:{torn} was cut short in the "
                                                     f"middle of an append, and the {len(rows)} whole rows before it do not reach {what})")
        if torn is not None:
            notes.append(f"note: {path}:{torn} was cut short in the middle of an append when the run ended; "
                         "it comes after the checkpoint, and the resume drops it")
    # What the first leg's machine chose stays its choice while the resume keeps the grouping (the
    # dashboard's card says so, also to one that first hears of the run now); a regrouping is the user's.
    kept = (config.n_workers, config.envs_per_worker) == (saved.n_workers, saved.envs_per_worker)
    check_can_start(config, (folder.path, folder.newest_checkpoint.parent), resumed=True)
    notes += regrouping_notes(saved, config)
    if saved.dashboard is not None and config.dashboard is None:
        notes.append(f"note: this run was sent to the dashboard {strip_userinfo(saved.dashboard)} before; "
                     "add --dashboard URL to send the resumed run to one")
    return LaunchPlan(config, point, folder.uuid, folder, machine_choices=MappingProxyType(checkpoint.machine_choices if kept else {}),
                      notes=tuple(notes), label=label)


def refuse_stop_below_steps(overrides: Mapping[str, Any], checkpoints: list[Path]) -> None:
    """A `--stop-after-env-steps` below the agent steps of every checkpoint the run keeps, refused
    before torch loads (which takes seconds): whichever of them the full read goes on from, the stop
    is below its steps. The refusal is `plan_resume`'s own (`launch_config`'s `reached`), in the
    newest one's counts, read from the checkpoint files without torch (ppo/checkpoint_counts.py).
    Where a checkpoint's counts cannot be read so, or the stop is not below them all, this answers
    nothing: the full read that follows does, with every check of the checkpoint it makes."""
    counts = []
    for path in checkpoints:  # newest first, as the full read tries them
        try:
            with open_to_read(path) as file:
                counts.append(read_counts(file))
        except FileNotFoundError:
            continue
        except (OSError, UnsafeRunFolder):
            return
    known = [told for told in counts if told is not None]
    if not known or len(known) < len(counts) or overrides["stop_after_env_steps"] >= min(told.env_steps for told in known):
        return
    newest = known[0]
    try:
        launch_config(overrides, None, saved=PPOConfig.from_dict(newest.config), game_exists=is_known_game,
                      reached=(newest.update, newest.env_steps))
    except ConfigError as e:
        if e.option == "--stop-after-env-steps":
            raise
    except Exception:  # a config the full read refuses, in its own words
        return


def check_can_start(config: PPOConfig, run_dirs: tuple[Path, ...] = (), resumed: bool = False) -> None:
    """What the config cannot say about this machine, checked before any process starts or any
    file is written: the device exists and has the precision asked for, a Ray backend's Ray is
    recent enough, and the run's folder can be created and written. `ConfigError` (one line naming
    the option) otherwise."""
    from ppo.devices import resolve_compute  # torch, once the options are accepted

    resolve_compute(config.device, config.precision)  # a missing GPU; bf16 where the hardware has none
    if config.backend == "ray" and (problem := ray_version_problem()) is not None:
        raise ConfigError("backend", config.backend, problem)  # one that cannot keep a private Ray private
    # A game without RIGHT, refused here rather than in every worker; a resume's game and relaunch are
    # its run's own, checked with its checkpoint (ppo.resume_point.read_resume_point).
    if not resumed and config.fire_on_reset and (refusal := relaunch_refusal(config.game, config.relaunch)):
        raise ConfigError("relaunch", config.relaunch, refusal)
    data_dir = config.data_dir
    targets = [Path(data_dir) / config.name, *run_dirs]  # a resume's folder and its checkpoints' too
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


def regrouping_notes(saved: PPOConfig, config: PPOConfig) -> list[str]:
    """A resume keeps its run's grouping unless told (it may be a choice: two processes a run, so
    that eight runs share a machine), and says what a regrouping changes, or suggests one where
    this machine's cores would group the games otherwise (`grouped_for_cores`, as for a new run):
    whether the network acts for the same games at once, so the run goes on bit for bit."""
    from ppo.rollout import acting_groups  # torch: a resume has loaded it already

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
