"""Checkpoints and summaries written atomically: a crash or a full disk mid-write leaves the
previous file whole, because the new one only replaces it once it is completely on disk.
`check_fits` is the one answer to "can this checkpoint's model be this model?"."""

from __future__ import annotations

import io
import json
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ppo.files import atomic_write
from ppo.model import ActorCritic

CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointError(RuntimeError):
    pass


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    try:
        atomic_write(path, buffer.getvalue())
    except OSError as e:
        raise CheckpointError(f"could not write checkpoint {path}: {e.strerror or e}; the previous checkpoint is intact") from e


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint is data, never code: loaded with `weights_only=True`, which rebuilds tensors
    and plain values (dicts, lists, numbers, strings, bytes) and refuses any other object before
    creating it. So a crafted file (a shared `--data-dir`, a download) cannot run anything here;
    everything this project saves is of those kinds (emulator states as bytes, RNG states as dicts)."""
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a crafted file
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path} is not a checkpoint of this project: it holds something other than tensors and "
                              f"plain values ({_refusal(str(e))}); nothing in it was run") from None
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path} is not a checkpoint of this project")
    return state


def _refusal(message: str) -> str:
    """The reason in torch's weights-only refusal, without its advice to load the file unsafely."""
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.strip().startswith(boilerplate)]
    return " ".join(lines) or "an object that is not plain data"


def saved_n_actions(checkpoint: dict[str, Any]) -> int:
    """The action count of a checkpoint's policy: recorded by `Trainer.state_dict`, else (older
    checkpoints) read off the policy head."""
    n_actions = checkpoint.get("n_actions")
    if n_actions is None:
        n_actions = checkpoint["model"]["policy.bias"].shape[0]
    return int(n_actions)


def check_fits(checkpoint: dict[str, Any], n_actions: int, frame_stack: int, game: str = "this game",
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


def sampled_on(checkpoint: dict[str, Any]) -> str:
    """The kind of device ("cpu" or "cuda") whose generator drew the checkpoint's actions: recorded
    as `sample_generator_device`, or (older checkpoints) told by the size of the state."""
    recorded = checkpoint.get("sample_generator_device")
    if recorded is not None:
        return str(recorded)
    size = checkpoint["sample_generator"].numel()
    return next(kind for kind, n in GENERATOR_STATE_BYTES.items() if n == size)


def check_random_states(checkpoint: dict[str, Any]) -> None:
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
