"""Checkpoints: what a run needs to go on exactly where it stopped, as one typed `Checkpoint`, and
the file that holds it, written atomically (a crash or a full disk mid-write leaves the previous file
whole, because the new one only replaces it once it is completely on disk). The file holds the
checkpoint's fields as a plain dict (`Checkpoint.stored`), the only form `load_checkpoint` accepts.
`check_fits` is the one answer to "can this checkpoint's model be this model?". A resume goes on from
a `ResumePoint` (`read_resume_point`), told what a new grouping of its games changes (`regrouping_notes`)."""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import torch
from torch import nn

from configs.fields import ConfigError
from configs.files import atomic_write
from configs.launch import grouped_for_cores
from configs.machine import usable_cores
from configs.ppo import PPOConfig
from game.atari import action_meanings, is_known_game, relaunch_refusal
from game.states import states_problem
from ppo.checkpoint_checks import (
    CheckpointError,
    check_fits,
    check_layouts,
    check_random_states,
    checked_live_values,
    checked_machine_choices,
    checked_machines,
    sampled_on,
    saved_n_actions,
)
from ppo.rollout import acting_groups

__all__ = ["CheckpointError", "check_fits", "saved_n_actions"]  # also asked of a checkpoint apart (ppo/evaluation/load.py)

# The layout of the fields below. 1: the files written before the version was recorded, the same
# fields save `version`, with `n_actions` and `sample_generator_device` possibly absent (told by the
# policy head and by the size of the generator's state instead).
CHECKPOINT_VERSION = 2


@dataclass(frozen=True)
class Checkpoint:
    """The learner's state after a completed update (`Trainer.state_dict`), and the run's own
    records of it. Checked for its shape when read (`from_stored`); whether its model fits a game
    (`check_fits`) and its random states can be restored (`check_random_states`) is asked apart,
    by whoever is about to use them."""

    config: dict[str, Any]  # the run's PPOConfig.to_dict()
    model: dict[str, torch.Tensor]  # the actor-critic's parameters
    optimizer: dict[str, Any]  # Adam's state_dict
    n_actions: int
    update: int  # updates completed
    env_steps: int  # agent steps taken, over all envs
    games: int  # full games finished
    scores: list[float]  # the last score_window games' full-game scores, oldest first
    lengths: list[int]  # their lengths in agent steps
    live_values: dict[str, Any]  # the live hyperparameters' bases, as the run last accepted them
    sample_generator: Any  # the action-sampling torch.Generator's state (uint8 tensor)
    sample_generator_device: str | None  # the kind of device that drew it; None: told by its size
    shuffle_rng: Any  # numpy's PCG64 state, the minibatch shuffle
    env_states: list[dict[str, Any]] | None = None  # each game's emulator state; None: the games start afresh
    worker_restarts: int = 0  # workers replaced over the whole run (the next replacement's seeds follow on)
    nonfinite_skipped: int = 0  # minibatches skipped for a NaN/inf loss
    machines: Any = None  # the machines that trained the run (checked on resume); None: not recorded
    machine_choices: Any = None  # the settings the first leg's machine chose, with why (checked on resume)
    version: int = CHECKPOINT_VERSION

    def stored(self) -> dict[str, Any]:
        """The fields as the plain dict a checkpoint file holds (the tensors themselves, not copies)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_stored(cls, state: Mapping[str, Any], source: str = "the checkpoint") -> Checkpoint:
        """A checkpoint file's dict as a `Checkpoint`; `CheckpointError` naming the first field that
        is missing or of the wrong kind. Fields of a newer layout than this code knows are refused."""
        version = state.get("version", 1)
        if not _is_int(version) or not 1 <= version <= CHECKPOINT_VERSION:
            raise CheckpointError(f"{source} has version {version!r}; this code reads versions 1 to {CHECKPOINT_VERSION}")
        kinds: dict[str, tuple[type, ...]] = {"config": (dict,), "model": (dict,), "optimizer": (dict,), "scores": (list,),
                                              "lengths": (list,), "live_values": (dict, type(None))}
        for name in (*kinds, "update", "env_steps", "games", "sample_generator", "shuffle_rng"):
            if name not in state:
                raise CheckpointError(f"{source} has no {name}: not a checkpoint of this project")
        for name, kind in kinds.items():
            if not isinstance(state[name], kind):
                raise CheckpointError(f"{source}'s {name} is a {type(state[name]).__name__}; expected a {kind[0].__name__}")
        for name in ("update", "env_steps", "games", "worker_restarts", "nonfinite_skipped"):
            if not (_is_int(value := state.get(name, 0)) and value >= 0):
                raise CheckpointError(f"{source}'s {name} is {value!r}; expected an integer ≥ 0")
        check_layouts(state, source)  # before any tensor is copied or computed on
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in state.items() if k in known}
        try:
            fields["n_actions"] = saved_n_actions(state)
        except (KeyError, AttributeError, TypeError, ValueError):
            raise CheckpointError(f"{source} has no n_actions, nor a policy head to tell it by") from None
        fields["live_values"] = state["live_values"] or {}
        fields.setdefault("sample_generator_device", None)
        fields["version"] = CHECKPOINT_VERSION
        return cls(**fields)

    def check_fits(self, n_actions: int, frame_stack: int, game: str = "this game", into: nn.Module | None = None) -> None:
        """`check_fits` for this checkpoint."""
        check_fits(self.stored(), n_actions, frame_stack, game, into)

    @property
    def sampled_on(self) -> str:
        """`sampled_on` for this checkpoint."""
        return sampled_on(self.stored())

    def check_random_states(self) -> None:
        """`check_random_states` for this checkpoint."""
        check_random_states(self.stored())


# What "the learner" is: the network, Adam's state and the schedule position (updates and agent
# steps, which set the annealing). Everything else of a checkpoint is the run's own: its games and
# their records, its seeds and random streams, its live values, its machines and counters.
LEARNER_FIELDS = ("model", "optimizer", "update", "env_steps")


def with_learner_of(own: Checkpoint, donor: Checkpoint) -> Checkpoint:
    """`own` with `donor`'s learner (`LEARNER_FIELDS`) in place of its own: what population-based
    training's exploit copies. The result keeps `own`'s games (emulator states, counts, scores),
    seeds, random streams, live values and config, so the run it resumes plays its own games on.
    `CheckpointError` when the donor's model is not a model of `own`'s shape (actions, frames).
    Neither argument is changed; the result shares their tensors, as `stored` does."""
    frames = own.config.get("frame_stack")
    if not _is_int(frames):
        raise CheckpointError(f"the checkpoint's config has frame_stack {frames!r}; expected an integer")
    donor.check_fits(own.n_actions, frames, "the checkpoint it is copied into")
    return dataclasses.replace(own, **{name: getattr(donor, name) for name in LEARNER_FIELDS})


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def save_checkpoint(path: Path, state: Checkpoint | dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(state.stored() if isinstance(state, Checkpoint) else state, buffer)
    try:
        atomic_write(path, buffer.getvalue())
    except OSError as e:
        raise CheckpointError(f"could not write checkpoint {path}: {e.strerror or e}; the previous checkpoint is intact") from e


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The dict a checkpoint file holds (`read_checkpoint`: as a `Checkpoint`). A checkpoint is
    data, never code: loaded with `weights_only=True`, which rebuilds tensors
    and plain values (dicts, lists, numbers, strings, bytes) and refuses any other object before
    creating it. So a crafted file (a shared `--data-dir`, a download) cannot run anything here;
    everything this project saves is of those kinds (emulator states as bytes, RNG states as dicts)."""
    try:
        found = path.is_file()
    except OSError as e:  # a name too long for the filesystem, a folder it cannot enter
        raise CheckpointError(f"no checkpoint at {path} ({e.strerror})") from None
    if not found:
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a crafted file
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path} is not a checkpoint of this project: it holds something other than tensors and "
                              f"plain values ({_refusal(str(e))}); nothing in it was run") from None
    except Exception as e:
        # Whatever the loader quotes of the bytes it choked on ("invalid load key, 'r'") is left
        # out: the file may be a link to, or a copy of, another file, which a refusal never shows.
        reason = re.sub(r"(['\"]).*?\1", "…", " ".join(str(e).split())).split(". ")[0][:200]
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: {reason})") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path} is not a checkpoint of this project")
    return state


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at `path`; `CheckpointError` when the file is not one (see `load_checkpoint`)."""
    return Checkpoint.from_stored(load_checkpoint(path), f"checkpoint {path}")


def _refusal(message: str) -> str:
    """What torch's weights-only loader refused, and nothing of its advice: that advice says how to
    load the file anyway (weights_only=False, or allowing the class), which is how a crafted file
    would run its code, so a refusal never passes it on."""
    if found := re.search(r"Unsupported global: GLOBAL (\S+)", message):
        return f"an object of class {found.group(1)}"
    if found := re.search(r"WeightsUnpickler error: ([^\n]*)", message):
        reason = re.split(r"\. |Please|weights_only|safe_globals|trust", found.group(1))[0].strip(" .")
        if reason:
            return reason
    return "an object that is not plain data"


@dataclass(frozen=True)
class ResumePoint:
    """A checkpoint checked whole (`read_resume_point`), what a resume goes on from and what an
    evaluation plays: frozen, and its tensors are never stepped in place (the trainer copies them in)."""

    checkpoint: Checkpoint  # its live values, machines and machine choices as far as they can be kept
    config: PPOConfig  # the run's own config, as the checkpoint holds it
    path: Path  # the file it was read from
    notes: tuple[str, ...] = ()  # what was skipped or dropped on the way, to tell the user


def read_resume_point(paths: Sequence[Path]) -> ResumePoint:
    """The one call that checks everything a checkpoint holds: its version and fields, every
    tensor's layout (before any copy), its config, finite parameters of the model of its game's
    actions and frames, its random states and its games' states. `paths`: a run's kept checkpoints,
    newest first, or a single file. A truncated or poisoned newest checkpoint does not lose the run:
    the one before it is used, with a warning naming what was skipped.

    Otherwise `CheckpointError`, whose one line (`refusal_of`) is what `--resume` and `evaluate` both
    print for the same file: the newest one's error when none loads."""
    refused: list[str] = []
    for path in paths:
        if refused and not path.exists():
            continue
        try:
            checkpoint = Checkpoint.from_stored(load_checkpoint(path))
            if not all(bool(torch.isfinite(t).all()) for t in checkpoint.model.values() if t.is_floating_point()):
                raise CheckpointError("the checkpoint holds NaN/inf parameters")
        except CheckpointError as e:
            refused.append(refusal_of(path, e))
            continue
        notes = [f"warning: {refused[0]}; resuming from the one before it, {path.name} (update {checkpoint.update})"] if refused else []
        try:
            try:
                config = PPOConfig.from_dict(checkpoint.config)
            except (ConfigError, TypeError) as e:
                raise CheckpointError(f"the checkpoint holds a config of another version ({e})") from None
            if not is_known_game(config.game):
                raise CheckpointError(f"the checkpoint's config names {config.game!r}, not an ALE game")
            if config.fire_on_reset and (refusal := relaunch_refusal(config.game, config.relaunch)):  # a resume cannot change it
                raise CheckpointError(f"the checkpoint's config has relaunch {config.relaunch!r}: expected {refusal}")
            checkpoint.check_fits(len(action_meanings(config.game)), config.frame_stack, config.game)
            checkpoint.check_random_states()
            if checkpoint.env_states is not None and (problem := states_problem(checkpoint.config, checkpoint.env_states, config.n_envs)):
                raise CheckpointError(f"the checkpoint's {problem}; nothing was started")
        except CheckpointError as e:
            raise CheckpointError(refusal_of(path, e)) from None
        checked = dataclasses.replace(checkpoint, live_values=checked_live_values(checkpoint.live_values, notes),
                                      machines=checked_machines(checkpoint.machines, notes),
                                      machine_choices=checked_machine_choices(checkpoint.machine_choices, notes))
        return ResumePoint(checked, config, path, tuple(notes))
    raise CheckpointError(refused[0])


def refusal_of(path: Path, error: CheckpointError) -> str:
    """The one line that refuses the checkpoint file `path`, shaped as every refusal of bad input is
    (configs/refusals.py): the file, what is accepted, and what is wrong with it."""
    return f"{path}: expected a checkpoint written by python -m experiments.breakout ({error})"


def regrouping_notes(saved: PPOConfig, config: PPOConfig) -> list[str]:
    """A resume keeps its run's grouping unless told (it may be a choice: two processes a run, so
    that eight runs share a machine), and says what a regrouping changes, or suggests one where
    this machine's cores would group the games otherwise (`grouped_for_cores`, as for a new run):
    whether the network acts for the same games at once, so the run goes on bit for bit."""
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


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
