"""Checkpoints and summaries written atomically: a crash or a full disk mid-write leaves the
previous file whole, because the new one only replaces it once it is completely on disk.
`check_fits` is the one answer to "can this checkpoint's model be this model?"."""

from __future__ import annotations

import io
import json
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
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        # The file holds emulator states and numpy RNG states besides tensors, so it is not a
        # weights-only file: load only checkpoints you wrote yourself.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path} is not a checkpoint of this project")
    return state


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
