"""Checkpoints: what a run needs to go on exactly where it stopped, as one typed `Checkpoint`, and
the file that holds it, written atomically (a crash or a full disk mid-write leaves the previous file
whole, because the new one only replaces it once it is completely on disk). The file holds the
checkpoint's fields as a plain dict (`Checkpoint.stored`), the only form `load_checkpoint` accepts,
and `from_stored` checks its shape and every tensor's layout before anything is copied. What its
contents mean (does the model fit the game, can its random states be restored, which records can be
kept) is checked by `ppo.resume_point.read_resume_point`."""

from __future__ import annotations

import collections
import dataclasses
import io
import pickle
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import torch

from configs.files import atomic_write

# The layout of the fields below. 1: the files written before the version was recorded, the same
# fields save `version`, with `n_actions` and `sample_generator_device` possibly absent (told by the
# policy head and by the size of the generator's state instead).
CHECKPOINT_VERSION = 2


class CheckpointError(RuntimeError):
    pass


@dataclass(frozen=True)
class Checkpoint:
    """The learner's state after a completed update (`Trainer.state_dict`), and the run's own
    records of it. Checked for its shape when read (`from_stored`); whether its model fits a game and
    its random states can be restored is asked apart (ppo/resume_point.py), by whoever is about to
    use them. A trainer's checkpoint holds dicts and lists; a resume point's, read-only mappings,
    tuples and read-only tensors (`ppo.resume_point.frozen`)."""

    config: Mapping[str, Any]  # the run's PPOConfig.to_dict()
    model: Mapping[str, torch.Tensor]  # the actor-critic's parameters
    optimizer: Mapping[str, Any]  # Adam's state_dict
    n_actions: int
    update: int  # updates completed
    env_steps: int  # agent steps taken, over all envs
    games: int  # full games finished
    scores: Sequence[float]  # the last score_window games' full-game scores, oldest first
    lengths: Sequence[int]  # their lengths in agent steps
    live_values: Mapping[str, Any]  # the live hyperparameters' bases, as the run last accepted them
    sample_generator: Any  # the action-sampling torch.Generator's state (uint8 tensor)
    sample_generator_device: str | None  # the kind of device that drew it; None: told by its size
    shuffle_rng: Any  # numpy's PCG64 state, the minibatch shuffle
    env_states: Sequence[Mapping[str, Any]] | None = None  # each game's emulator state; None: the games start afresh
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


def check_layouts(stored: Mapping[str, Any], source: str) -> None:
    """Refuse (`CheckpointError`) a checkpoint holding a tensor that does not own its elements: one
    whose strides make elements share a place in its storage (a stride-0 tensor of 10⁶×10⁶ elements
    is 4 bytes on disk and 4 TB once anything computes on it) or reach past it. Every tensor this
    project saves is dense: its strides a permutation of a contiguous layout (channels-last too).
    Only sizes and strides are read: nothing is copied or computed."""
    def walk(value: Any, where: str) -> None:
        if torch.is_tensor(value):
            dims = sorted((s, n) for s, n in zip(value.stride(), value.shape, strict=True) if n != 1)
            dense = 1
            for stride, size in dims:
                if stride != dense:
                    break
                dense *= size
            else:
                if (value.storage_offset() + value.numel()) * value.element_size() <= value.untyped_storage().nbytes():
                    return
            raise CheckpointError(f"{source}'s {where} is a tensor of shape {tuple(value.shape)} with strides "
                                  f"{tuple(value.stride())} over {value.untyped_storage().nbytes():,} bytes: expected "
                                  "one whose every element has a place of its own (nothing in it was used)")
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{where}[{key!r}]")
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(item, f"{where}[{index}]")
    for name, value in stored.items():
        walk(value, name)


def saved_n_actions(checkpoint: Mapping[str, Any]) -> int:
    """The action count of a checkpoint's policy: recorded by `Trainer.state_dict`, else (older
    checkpoints) read off the policy head."""
    n_actions = checkpoint.get("n_actions")
    if n_actions is None:
        n_actions = checkpoint["model"]["policy.bias"].shape[0]
    return int(n_actions)



def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def save_checkpoint(path: Path, state: Checkpoint | dict[str, Any]) -> None:
    stored = state.stored() if isinstance(state, Checkpoint) else state
    if (kind := _not_plain(stored)) is not None:  # a resume point's read-only dict would be refused on load
        raise TypeError(f"a checkpoint holds plain dicts only, not a {kind}: thaw what a resume point gave (ppo/resume_point.py)")
    buffer = io.BytesIO()
    torch.save(stored, buffer)
    try:
        atomic_write(path, buffer.getvalue())
    except OSError as e:
        raise CheckpointError(f"could not write checkpoint {path}: {e.strerror or e}; the previous checkpoint is intact") from e


def _not_plain(value: Any) -> str | None:
    """The name of the first mapping in `value` that is not a plain dict or OrderedDict (a module's
    state_dict): weights-only loading takes no other."""
    if isinstance(value, Mapping):
        if type(value) not in (dict, collections.OrderedDict):
            return type(value).__name__
        return next((kind for item in value.values() if (kind := _not_plain(item)) is not None), None)
    if isinstance(value, list | tuple):
        return next((kind for item in value if (kind := _not_plain(item)) is not None), None)
    return None


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
