"""What `ppo.checkpoint.read_resume_point` asks of a checkpoint file's contents, one question each:
is every tensor laid out as a file of ours lays it out (asked first, before any tensor is copied or
computed on), does the model fit its game, can its random states be restored, and which of its
records (live values, machines) can be kept. A checkpoint is data from a file: whoever may write
the data dir may have crafted it."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from configs.launch import GROUPING
from configs.ppo import accepted_live_values
from ppo.model import ActorCritic


class CheckpointError(RuntimeError):
    pass


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


def check_fits(checkpoint: Mapping[str, Any], n_actions: int, frame_stack: int, game: str = "this game",
               into: nn.Module | None = None) -> None:
    """Refuse (`CheckpointError`) a checkpoint whose model is not an `ActorCritic(n_actions, frame_stack)`
    of floating-point parameters. `game` names whose `n_actions` they are, for the message. `into`:
    a model of that shape to load the weights into when they fit; without it a scratch one is built,
    only to check."""
    saved = saved_n_actions(checkpoint)
    if saved != n_actions:
        raise CheckpointError(f"the checkpoint's model has {saved} actions; {game} has {n_actions}")
    stacked = checkpoint["config"].get("frame_stack", frame_stack)
    if stacked != frame_stack:
        raise CheckpointError(f"the checkpoint's model stacks {stacked} frames; this config stacks {frame_stack}")
    scratch = into is None
    if into is None:
        # On the meta device: shapes without storage, so no initial weights are drawn (the
        # orthogonal init's QR took 1.5 s of a refusal's time) and no random stream of the
        # caller (a run about to resume, say) moves.
        with torch.device("meta"):
            into = ActorCritic(n_actions, frame_stack)
    # Shapes and dtypes first, all of them: a tensor is copied only once every one fits.
    expected = into.state_dict()
    for name, value in checkpoint["model"].items():
        if name in expected and torch.is_tensor(value) and not (value.is_floating_point() and value.shape == expected[name].shape):
            raise CheckpointError(f"the checkpoint's model does not fit this config: {name} is a {value.dtype} tensor of shape "
                                  f"{tuple(value.shape)}, expected a floating-point one of shape {tuple(expected[name].shape)}")
    if scratch:  # nothing to load into: the names alone are left to check, as load_state_dict would
        missing, unexpected = sorted(set(expected) - set(checkpoint["model"])), sorted(set(checkpoint["model"]) - set(expected))
        if missing or unexpected:
            raise CheckpointError(f"the checkpoint's model does not fit this config: missing {missing}, unexpected {unexpected}")
        return
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
    """A checkpoint's list of the machines that trained it, as plain string-to-string records
    (anything else in it is dropped, and noted). A checkpoint written before runs recorded their
    machines gives one `UNRECORDED_MACHINE`."""
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
    (anything else is dropped, and noted); none where not recorded."""
    if saved is None:
        return {}
    if isinstance(saved, dict) and all(k in GROUPING and isinstance(v, str) and v.isprintable() and len(v) <= MAX_MACHINE_FIELD
                                       for k, v in saved.items()):
        return dict(saved)
    notes.append(f"warning: ignoring the checkpoint's machine_choices = {reprlib.repr(saved)}: expected "
                 f"{', '.join(sorted(GROUPING))} with reasons of {MAX_MACHINE_FIELD} printable characters at most")
    return {}
