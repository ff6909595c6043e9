"""Generalised Advantage Estimation (Schulman et al. 2016), vectorised over workers."""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminals: np.ndarray,
    truncations: np.ndarray,
    truncation_values: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Advantages and returns for arrays of shape (workers, steps).

    Index convention: at step `t` the agent saw `s_t` (value `values[:, t]`), took an action and got
    `rewards[:, t]`. `terminals[:, t]` means the episode ended on that transition: `s_{t+1}` is the
    start of a new life/game and is worth nothing to `s_t`. `truncations[:, t]` means the time limit
    cut the episode there: the next state was not terminal, so we bootstrap from
    `truncation_values[:, t]` = V(the final, truncated observation) instead of the next row's value
    (which belongs to the new game). `last_values` = V(s_T), the state after the rollout.

    $\delta_t = r_t + \gamma V_{next,t} (1 - terminal_t) - V(s_t)$ and
    $A_t = \delta_t + \gamma \lambda (1 - done_t) A_{t+1}$, where done = terminal or truncated:
    λ trades the low variance of one-step TD ($\lambda=0$) for the low bias of Monte-Carlo ($\lambda=1$),
    and no credit flows across an episode boundary. Returns are $A_t + V(s_t)$, the value targets.
    """
    n_workers, n_steps = rewards.shape
    for name, array in (("values", values), ("terminals", terminals), ("truncations", truncations),
                        ("truncation_values", truncation_values)):
        assert array.shape == (n_workers, n_steps), f"{name} has shape {array.shape}, expected {rewards.shape}"
    assert last_values.shape == (n_workers,), f"last_values has shape {last_values.shape}, expected ({n_workers},)"

    next_values = np.empty_like(values)
    next_values[:, :-1] = values[:, 1:]
    next_values[:, -1] = last_values
    next_values = np.where(truncations, truncation_values, next_values)
    not_terminal = 1.0 - terminals.astype(values.dtype)
    not_done = 1.0 - (terminals | truncations).astype(values.dtype)
    deltas = rewards + gamma * next_values * not_terminal - values

    advantages = np.empty_like(values)
    running = np.zeros(n_workers, dtype=values.dtype)
    for t in reversed(range(n_steps)):
        running = deltas[:, t] + gamma * gae_lambda * not_done[:, t] * running
        advantages[:, t] = running
    return advantages, advantages + values
