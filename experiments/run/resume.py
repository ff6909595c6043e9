"""Resuming a run: everything a `--resume` checks before anything starts or is rewritten (the run
exists and is not running, its last good checkpoint, its records, the options that may change and
the grouping of its games), planned as the config and `Checkpoint` it goes on from (plan.py)."""

from __future__ import annotations

import csv
import dataclasses
import os
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from configs.fields import ConfigError
from configs.grouping import grouped_for_cores, usable_cores
from configs.launch import GROUPING, launch_config
from configs.ppo import PPOConfig, accepted_live_values
from configs.urls import strip_userinfo
from experiments.run.appended_csv import torn_last_line
from experiments.run.folder_checks import UnsafeRunFolder, check_run_folder
from experiments.run.folders import checkpoint_paths, running_pid
from experiments.run.games_csv import read_games
from experiments.run.plan import LaunchPlan
from experiments.run.preflight import check_can_start
from experiments.run.updates_csv import read_update_numbers
from game.atari import action_meanings, is_known_game
from game.states import states_problem
from ppo.checkpoint import Checkpoint, CheckpointError, read_checkpoint
from ppo.rollout import acting_groups


def load_last_good_checkpoint(paths: list[Path], notes: list[str]) -> Checkpoint:
    """The newest of a run's kept checkpoints (`paths`, newest first) that loads and holds finite parameters.

    A truncated or poisoned newest checkpoint does not lose the run: the one before it is used,
    with a warning (added to `notes`) naming what was skipped. When none is usable, the newest
    one's error is raised.
    """
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


def plan_resume(run_dir: Path, run_uuid: str, overrides: Mapping[str, Any]) -> LaunchPlan:
    """The plan that goes on with run `run_uuid` in `run_dir`: its own config (plus the changes a
    resume may make, configs/launch.py) and its last good checkpoint, each checked before anything
    starts or is rewritten; `ConfigError` or `CheckpointError` in one line otherwise."""
    # Its folder, before a byte of it is read (experiments/run/folder_checks.py).
    try:
        check_run_folder(run_dir)
    except UnsafeRunFolder as e:
        raise ConfigError("resume", run_uuid, f"a run folder of plain files and folders ({e}; nothing was read or written)") from None
    if (pid := running_pid(run_dir)) is not None and pid != os.getpid():
        raise ConfigError("resume", run_uuid, f"a run that is not running (process {pid} is still running it)")
    notes: list[str] = []
    checkpoint = load_last_good_checkpoint(checkpoint_paths(run_dir), notes)
    # Its config, then what would otherwise fail only once the workers started.
    saved = PPOConfig.from_dict(checkpoint.config)
    config, _ = launch_config(overrides, None, saved=saved, game_exists=is_known_game)
    checkpoint.check_fits(len(action_meanings(config.game)), config.frame_stack, config.game)
    checkpoint.check_random_states()
    if checkpoint.env_states is not None and (problem := states_problem(checkpoint.config, checkpoint.env_states, saved.n_envs)):
        raise CheckpointError(f"the checkpoint's {problem}; nothing was started")
    # A stop below the steps already taken cannot be kept (the run would claim to have ended before
    # where it is); one at them ends the resume at once, as a member of a population reaching its target.
    if config.stop_after_env_steps is not None and config.stop_after_env_steps < checkpoint.env_steps:
        raise ConfigError("stop_after_env_steps", config.stop_after_env_steps,
                          f"at least the run's own {checkpoint.env_steps} agent steps (update {checkpoint.update} of "
                          f"{config.n_updates}), or none, to resume it")
    # The folder can be written, and its records reach the checkpoint (the resume keeps their rows up to it).
    check_can_start(config, run_dir)
    notes += check_records(run_dir, run_uuid, checkpoint)
    checked = dataclasses.replace(checkpoint, live_values=checked_live_values(checkpoint.live_values, notes),
                                  machines=checked_machines(checkpoint.machines, notes))
    # What the first leg's machine chose stays its choice while the resume keeps the grouping (the
    # dashboard's card says so, also to one that first hears of the run now); a regrouping is the user's.
    kept = (config.n_workers, config.envs_per_worker) == (saved.n_workers, saved.envs_per_worker)
    choices = checked_machine_choices(checkpoint.machine_choices, notes) if kept else {}
    notes += regrouping_notes(saved, config)
    if saved.dashboard is not None and config.dashboard is None:
        notes.append(f"note: this run was sent to the dashboard {strip_userinfo(saved.dashboard)} before; "
                     "add --dashboard URL to send the resumed run to one")
    return LaunchPlan(config, checked, run_uuid, run_dir, choices, tuple(notes))


def regrouping_notes(saved: PPOConfig, config: PPOConfig) -> list[str]:
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
        return [f"note: the run's {saved.n_envs} games ran as {saved.n_workers} × {saved.envs_per_worker} and go on as "
                f"{config.n_workers} × {config.envs_per_worker}; {effect[same_batches(saved, config)]}"]
    cores = usable_cores()
    suited = grouped_for_cores(saved, cores)
    if config.backend == "local" and (suited.n_workers, suited.envs_per_worker) != (saved.n_workers, saved.envs_per_worker):
        return [f"note: the run's {saved.n_envs} games go on as {saved.n_workers} × {saved.envs_per_worker}, as they ran; for "
                f"this machine's {cores} usable cores, --n-workers {suited.n_workers} would group them {suited.n_workers} × "
                f"{suited.envs_per_worker} ({suggestion[same_batches(saved, suited)]})"]
    return []


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
