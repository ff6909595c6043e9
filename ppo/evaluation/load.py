"""A trained policy back from a checkpoint file's contents, ready to play."""

from __future__ import annotations

from typing import Any

import torch

from ppo.checkpoint import saved_n_actions
from ppo.model import ActorCritic
from ppo.resume_point import check_fits


def model_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "cpu") -> ActorCritic:
    """The actor-critic of a checkpoint written by `Trainer.state_dict`, on `device`, in eval mode.

    Built from the checkpoint's own action count and frame stack; `CheckpointError` when its
    weights do not fit them (a hand-edited or foreign file), `KeyError` when it lacks the config."""
    n_actions, frame_stack = saved_n_actions(checkpoint), int(checkpoint["config"]["frame_stack"])
    model = ActorCritic(n_actions, frame_stack)
    check_fits(checkpoint, n_actions, frame_stack, into=model)
    return model.to(torch.device(device)).eval()


__all__ = ["model_from_checkpoint"]
