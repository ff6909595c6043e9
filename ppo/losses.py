"""The PPO objective's three parts, as pure functions that check shapes and return diagnostics.

Every input is a 1-D batch (B,). A (B, 1) value head output against (B,) returns would broadcast
to (B, B) and silently train on nonsense; the asserts make that impossible.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def _same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 1 or any(shape != first for shape in shapes.values()):
        raise ValueError(f"expected equal 1-D shapes, got {shapes}")


class PolicyLoss(NamedTuple):
    loss: torch.Tensor  # scalar to minimise
    clip_fraction: torch.Tensor  # share of samples whose ratio left [1 - ε, 1 + ε]
    approx_kl: torch.Tensor  # estimate of KL(old ‖ new)


def clipped_policy_loss(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> PolicyLoss:
    r"""$-\mathbb{E}[\min(r A, \mathrm{clip}(r, 1-\epsilon, 1+\epsilon) A)]$, $r = \pi/\pi_{old}$.

    Taking the minimum makes the objective a pessimistic bound: moving the ratio beyond the clip
    can only lower it, so there is no incentive to take a larger step than ε from the policy that
    collected the data (Schulman et al. 2017).
    """
    _same_shape(log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages)
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * advantages
    loss = -torch.min(unclipped, clipped).mean()
    with torch.no_grad():
        clip_fraction = ((ratio - 1.0).abs() > clip_range).float().mean()
        # (r - 1) - log r is unbiased for KL(old‖new) and never negative (Schulman, "Approximating
        # KL divergence", 2020); the naive mean of -log r can go negative on a minibatch.
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
    return PolicyLoss(loss, clip_fraction, approx_kl)


class ValueLoss(NamedTuple):
    loss: torch.Tensor  # scalar to minimise
    clip_fraction: torch.Tensor  # share of samples whose value gradient the clip removed (0 unclipped)


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_range: float | None
) -> ValueLoss:
    r"""$\frac12 \mathbb{E}[\max((V - R)^2, (V_{old} + \mathrm{clip}(V - V_{old}, \pm\epsilon) - R)^2)]$.

    The same pessimism as the policy clip, applied to the critic; `clip_range=None` gives the plain
    squared error. Where V has moved more than ε from V_old the clipped term no longer depends on V,
    and where it is also the larger term the sample gives the critic no gradient at all: its
    `clip_fraction` is the share of the batch the critic cannot learn from in this step.
    """
    _same_shape(values=values, old_values=old_values, returns=returns)
    squared = (values - returns) ** 2
    if clip_range is None:
        return ValueLoss(0.5 * squared.mean(), torch.zeros((), device=values.device))
    moved = values - old_values
    clipped_squared = (old_values + moved.clamp(-clip_range, clip_range) - returns) ** 2
    with torch.no_grad():
        clip_fraction = ((moved.abs() > clip_range) & (clipped_squared > squared)).float().mean()
    return ValueLoss(0.5 * torch.max(squared, clipped_squared).mean(), clip_fraction)


def entropy_bonus(logits: torch.Tensor) -> torch.Tensor:
    """Mean entropy of the categorical policies; subtracted from the loss to keep exploring."""
    if logits.dim() != 2:
        raise ValueError(f"expected logits (B, n_actions), got {tuple(logits.shape)}")
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1).mean()


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor) -> float:
    """1 − Var(targets − predictions)/Var(targets): 1 is perfect, 0 no better than the mean."""
    _same_shape(predictions=predictions, targets=targets)
    variance = targets.var()
    if variance == 0:
        return float("nan")
    return float(1.0 - (targets - predictions).var() / variance)


class PPOLoss(NamedTuple):
    total: torch.Tensor  # what is minimised: policy + value_coef × value − entropy_coef × entropy
    policy: PolicyLoss
    value: ValueLoss
    entropy: torch.Tensor


def log_probs_of(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log π(a|s) of each taken action, from the policy's logits (B, n_actions) and actions (B,)."""
    return torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def ppo_loss(
    logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, old_log_probs: torch.Tensor, old_values: torch.Tensor,
    advantages: torch.Tensor, returns: torch.Tensor, *, clip_range: float, value_clip_range: float | None,
    value_coef: float, entropy_coef: float, normalize_advantages: bool,
) -> PPOLoss:
    """The whole PPO objective on one minibatch, from the network's outputs."""
    log_probs = log_probs_of(logits, actions)
    if normalize_advantages and advantages.numel() > 1:
        # Per minibatch, as ppo2 does: the step size stops depending on the reward scale.
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy = clipped_policy_loss(log_probs, old_log_probs, advantages, clip_range)
    value = clipped_value_loss(values, old_values, returns, value_clip_range)
    entropy = entropy_bonus(logits)
    return PPOLoss(policy.loss + value_coef * value.loss - entropy_coef * entropy, policy, value, entropy)
