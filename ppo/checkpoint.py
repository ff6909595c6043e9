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


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
