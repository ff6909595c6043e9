"""One Adam step of PPO on one minibatch: what the trainer does for every minibatch, and what the
benchmark times as a training step (so both measure the same arithmetic)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from ppo.losses import ppo_loss
from ppo.rollout import Batch
from ppo.schedule import IterationSettings

Forward = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # observations -> (logits, values)


class StepResult(NamedTuple):
    total: float  # the loss minimised
    grad_norm: float  # the gradient's global norm before clipping
    metrics: dict[str, float]  # trainer.MINIBATCH_METRICS' values

    @property
    def finite(self) -> bool:
        return math.isfinite(self.total) and math.isfinite(self.grad_norm)


def minibatch_step(forward: Forward, optimizer: torch.optim.Optimizer, minibatch: Batch, settings: IterationSettings,
                   normalize_advantages: bool, max_grad_norm: float) -> StepResult:
    """Forward, the PPO loss, backward, the gradient clipped to `max_grad_norm`, and an Adam step,
    taken only when the loss and the gradient norm are finite (else the gradient is dropped, and
    `finite` says so)."""
    logits, values = forward(minibatch.observations)
    loss = ppo_loss(logits, values, minibatch.actions, minibatch.log_probs, minibatch.values, minibatch.advantages,
                    minibatch.returns, clip_range=settings.clip_range, value_clip_range=settings.value_clip_range,
                    value_coef=settings.value_coef, entropy_coef=settings.entropy_coef,
                    normalize_advantages=normalize_advantages)
    optimizer.zero_grad(set_to_none=True)
    loss.total.backward()
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    metrics = {"policy_loss": loss.policy.loss, "value_loss": loss.value.loss, "entropy": loss.entropy,
               "approx_kl": loss.policy.approx_kl, "clip_fraction": loss.policy.clip_fraction,
               "value_clip_fraction": loss.value.clip_fraction}
    # One device-to-host copy for the finiteness check and every metric: each `.item()` waits for
    # the device to finish its queue, so reading them one by one would stall a GPU 7 times here.
    total, norm, *numbers = torch.stack([t.detach().float() for t in (loss.total, grad_norm, *metrics.values())]).tolist()
    result = StepResult(total, norm, dict(zip(metrics, numbers, strict=True)))
    if result.finite:
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    return result
