"""A launch, planned before anything starts: the config, the checkpoint a resume goes on from, the
run's folder, what this machine chose, and the notes to print. Made once, with no side effects
(nothing deleted, nothing printed); `TrainingRun` then acts on it.

A new run's plan needs nothing of the learner until its config is accepted, so a refused option
answers before torch loads; a resume reads its checkpoint, with torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from configs.cli import game_check
from configs.fields import ConfigError
from configs.grouping import usable_cores
from configs.launch import launch_config
from configs.ppo import PPOConfig
from experiments.run.folders import find_run, no_such_run
from game.atari import canonical_game

if TYPE_CHECKING:
    from ppo.checkpoint import Checkpoint


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
        from experiments.run.resume import plan_resume
        from ppo.checkpoint import CheckpointError

        try:
            return plan_resume(run_dir, resume_uuid, overrides)
        except CheckpointError as e:
            raise LaunchRefused(str(e)) from None
    config, choices = launch_config(overrides, usable_cores(), game_exists=game_check(canonical_game))
    from experiments.run.preflight import check_can_start

    check_can_start(config)  # the device exists, the run folder can be written
    return LaunchPlan(config, machine_choices=choices)
