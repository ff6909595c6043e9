"""Preallocated storage for one rollout, laid out (envs, steps) as GAE wants it."""

from __future__ import annotations

import numpy as np
import torch

from ppo.gae import compute_gae


class Rollout:
    """Written step by step during sampling, read as one flat batch during optimisation.

    Allocated once for the whole run: sampling does no per-step allocation, and frames stay uint8.
    """

    def __init__(self, n_envs: int, n_steps: int, observation_shape: tuple[int, ...]) -> None:
        self.n_envs, self.n_steps = n_envs, n_steps
        shape = (n_envs, n_steps)
        self.observations = np.zeros((*shape, *observation_shape), np.uint8)
        self.actions = np.zeros(shape, np.int64)
        self.log_probs = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.rewards = np.zeros(shape, np.float32)
        self.terminals = np.zeros(shape, np.bool_)
        self.truncations = np.zeros(shape, np.bool_)
        self.truncation_values = np.zeros(shape, np.float32)
        self.last_values = np.zeros(n_envs, np.float32)
        self.advantages = np.zeros(shape, np.float32)
        self.returns = np.zeros(shape, np.float32)

    @property
    def size(self) -> int:
        return self.n_envs * self.n_steps

    def compute_advantages(self, gamma: float, gae_lambda: float) -> None:
        self.advantages[:], self.returns[:] = compute_gae(
            self.rewards, self.values, self.terminals, self.truncations, self.truncation_values,
            self.last_values, gamma, gae_lambda,
        )

    def flat_batch(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The whole rollout as (B, …) tensors on `device`, moved once per update."""
        def flat(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array.reshape(self.size, *array.shape[2:])).to(device, non_blocking=True)

        return {
            "observations": flat(self.observations),
            "actions": flat(self.actions),
            "log_probs": flat(self.log_probs),
            "values": flat(self.values),
            "advantages": flat(self.advantages),
            "returns": flat(self.returns),
        }
