"""A launch, planned before anything starts: the config, the checkpoint a resume goes on from, the
run's folder, what this machine chose, and the notes to print. Made once, with no side effects
(nothing deleted, nothing printed), and immutable all the way down (a frozen config, a frozen
resume point whose tensors the trainer copies in); `TrainingRun` then acts on it. `plan_launch` is
the one way a run is planned: a training run, a resume, a sweep's trial and a population's member.

The layers, in order: the defaults (or, on a resume, the run's own config and checkpoint, read once
and checked whole by `ppo.checkpoint.read_resume_point`, its folder and records by `RunFolder`),
then the command line, then this machine's grouping of the games, merged and validated once
(configs/launch.py); last, what the config cannot say about this machine (`check_can_start`). A
new run's plan, and a resume of a run without a checkpoint, need nothing of the learner: a refusal
answers before torch loads."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from configs.cli import game_check
from configs.fields import ConfigError
from configs.launch import launch_config
from configs.machine import usable_cores
from configs.ppo import PPOConfig
from configs.urls import strip_userinfo
from experiments.run.folder_checks import UnsafeRunFolder
from experiments.run.folders import RunFolder, checkpoint_paths
from game.atari import canonical_game, is_known_game, relaunch_refusal
from game.vector.private_ray import ray_version_problem

if TYPE_CHECKING:
    from ppo.checkpoint import ResumePoint


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
    if resume is not None:  # answered before the learner loads
        if (folder := RunFolder.named(data_dir, resume, "resume")) is None:
            raise ConfigError("resume", resume, f"the uuid of a run under {data_dir}/ ({RunFolder.none_named(data_dir)})")
        if not any(path.exists() for path in checkpoint_paths(folder.path)):
            raise ConfigError("resume", resume, f"a run with a checkpoint to resume from ({folder.path} has none: it "
                                                "stopped before its first checkpoint, so there is nothing to go on from)")
        return plan_resume(folder, overrides)
    folder = RunFolder.named(data_dir, run_uuid, "run_uuid") if run_uuid is not None else None
    if folder is not None and any(path.exists() for path in checkpoint_paths(folder.path)):
        return replace(plan_resume(folder, overrides), label=label)
    cores = usable_cores() if run_uuid is None else None  # a trial's games are grouped by its sweep or population
    config, choices = launch_config(overrides, cores, game_exists=game_check(canonical_game))
    if folder is not None:
        try:
            folder.check()  # the lost start's, cleared as the run starts: nothing is removed through a link
        except UnsafeRunFolder as e:
            raise LaunchRefused(str(e)) from None
    check_can_start(config)
    return LaunchPlan(config, run_uuid=run_uuid, folder=folder, lost_start=folder is not None,
                      machine_choices=MappingProxyType(choices), label=label)


def plan_resume(folder: RunFolder, overrides: Mapping[str, Any]) -> LaunchPlan:
    """The plan that goes on with the run in `folder`: its own config and last good checkpoint,
    read once with its records (`RunFolder.resume_point`), with the changes its command line may
    make (configs/launch.py); `ConfigError` or `LaunchRefused` in one line otherwise."""
    from ppo.checkpoint import CheckpointError

    try:
        point = folder.resume_point()
    except CheckpointError as e:
        raise LaunchRefused(str(e)) from None
    checkpoint, saved, notes = point.checkpoint, point.config, list(point.notes)
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
    notes += check_can_start(config, folder.path, saved)
    if saved.dashboard is not None and config.dashboard is None:
        notes.append(f"note: this run was sent to the dashboard {strip_userinfo(saved.dashboard)} before; "
                     "add --dashboard URL to send the resumed run to one")
    return LaunchPlan(config, point, folder.uuid, folder, machine_choices=MappingProxyType(checkpoint.machine_choices if kept else {}),
                      notes=tuple(notes))


def check_can_start(config: PPOConfig, run_dir: Path | None = None, saved: PPOConfig | None = None) -> list[str]:
    """What the config cannot say about this machine, checked before any process starts or any
    file is written: the device exists and has the precision asked for, a Ray backend's Ray is
    recent enough, and the run's folder can be created and written. `ConfigError` (one line naming
    the option) otherwise. For a resume of a run whose config was `saved`, what this machine says
    of its grouping (`ppo.rollout.regrouping_notes`), as notes."""
    from ppo.devices import resolve_device, resolve_precision  # torch, once the options are accepted
    from ppo.rollout import regrouping_notes

    notes = regrouping_notes(saved, config) if saved is not None else []
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
    return notes
