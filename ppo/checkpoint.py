"""Checkpoints and summaries written atomically: a crash or a full disk mid-write leaves the
previous file whole, because the new one only replaces it once it is completely on disk."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from ppo.files import atomic_write

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


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
