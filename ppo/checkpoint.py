"""Checkpoints: what a run needs to go on exactly where it stopped, as one typed `Checkpoint`, and
the file that holds it, written atomically (a crash or a full disk mid-write leaves the previous file
whole, because the new one only replaces it once it is completely on disk). The file holds the
checkpoint's fields as a plain dict (`Checkpoint.stored`), the only form `load_checkpoint` accepts.
`check_fits` is the one answer to "can this checkpoint's model be this model?"."""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import torch
from torch import nn

from configs.files import atomic_write
from ppo.model import ActorCritic

# The layout of the fields below. 1: the files written before the version was recorded, the same
# fields save `version`, with `n_actions` and `sample_generator_device` possibly absent (told by the
# policy head and by the size of the generator's state instead).
CHECKPOINT_VERSION = 2


class CheckpointError(RuntimeError):
    pass


@dataclass
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


def saved_n_actions(checkpoint: Mapping[str, Any]) -> int:
    """The action count of a checkpoint's policy: recorded by `Trainer.state_dict`, else (older
    checkpoints) read off the policy head."""
    n_actions = checkpoint.get("n_actions")
    if n_actions is None:
        n_actions = checkpoint["model"]["policy.bias"].shape[0]
    return int(n_actions)


def check_fits(checkpoint: Mapping[str, Any], n_actions: int, frame_stack: int, game: str = "this game",
               into: nn.Module | None = None) -> None:
    """Refuse (`CheckpointError`) a checkpoint whose model is not an `ActorCritic(n_actions, frame_stack)`.

    `game` names whose `n_actions` they are, for the message. `into`: a model of that shape to load
    the weights into when they fit; without it a scratch one is built, only to check.
    """
    saved = saved_n_actions(checkpoint)
    if saved != n_actions:
        raise CheckpointError(f"the checkpoint's model has {saved} actions; {game} has {n_actions}")
    stacked = checkpoint["config"].get("frame_stack", frame_stack)
    if stacked != frame_stack:
        raise CheckpointError(f"the checkpoint's model stacks {stacked} frames; this config stacks {frame_stack}")
    if into is None:
        # Building a model draws its initial weights: from a forked stream, so that checking
        # moves no random stream of the caller (a run about to resume, say).
        with torch.random.fork_rng(devices=[]):
            into = ActorCritic(n_actions, frame_stack)
    try:
        into.load_state_dict(checkpoint["model"])
    except RuntimeError as e:
        raise CheckpointError(f"the checkpoint's model does not fit this config: {str(e).splitlines()[0]}") from None


# The state of a torch.Generator, by the kind of device it draws on: the CPU's Mersenne Twister
# (5,056 bytes) and CUDA's Philox (a seed and an offset, 16 bytes) share nothing, so neither can
# take the other's. Only these two kinds: `--device` names cpu or cuda.
GENERATOR_STATE_BYTES = {"cpu": torch.Generator().get_state().numel(), "cuda": 16}


def sampled_on(checkpoint: Mapping[str, Any]) -> str:
    """The kind of device ("cpu" or "cuda") whose generator drew the checkpoint's actions: recorded
    as `sample_generator_device`, or (older checkpoints) told by the size of the state."""
    recorded = checkpoint.get("sample_generator_device")
    if recorded is not None:
        return str(recorded)
    size = checkpoint["sample_generator"].numel()
    return next(kind for kind, n in GENERATOR_STATE_BYTES.items() if n == size)


def check_random_states(checkpoint: Mapping[str, Any]) -> None:
    """Refuse (`CheckpointError`) a checkpoint whose action-sampling or shuffling state cannot be
    restored, before anything starts: restoring them is the resume's first step after the workers
    start, too late to refuse cleanly. Each state is tried on a scratch generator of its kind."""
    state = checkpoint.get("sample_generator")
    kinds = " or ".join(f"the {n:,} bytes of a {kind.upper()} generator's state" for kind, n in GENERATOR_STATE_BYTES.items())
    if not (torch.is_tensor(state) and state.dtype == torch.uint8 and state.dim() == 1
            and state.numel() in GENERATOR_STATE_BYTES.values()):
        what = f"a {state.dtype} tensor of shape {tuple(state.shape)}" if torch.is_tensor(state) else f"{type(state).__name__} {state!r:.60}"
        raise CheckpointError(f"the checkpoint's sample_generator is {what}; expected {kinds} (uint8)")
    device = sampled_on(checkpoint)
    if GENERATOR_STATE_BYTES.get(device) != state.numel():
        raise CheckpointError(f"the checkpoint's sample_generator_device is {device!r} but its sample_generator "
                              f"holds {state.numel():,} bytes; expected {kinds}")
    if device == "cpu":
        try:
            torch.Generator().set_state(state)
        except RuntimeError as e:
            raise CheckpointError(f"the checkpoint's sample_generator is not a CPU generator's state ({str(e).splitlines()[0]})") from None
    try:
        shuffle = checkpoint.get("shuffle_rng")
        if not isinstance(shuffle, dict):
            raise TypeError(f"a {type(shuffle).__name__}, not a dict")
        np.random.default_rng().bit_generator.state = shuffle
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"the checkpoint's shuffle_rng is not the state of numpy's PCG64 generator ({type(e).__name__}: {e})") from None


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
