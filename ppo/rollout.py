"""Preallocated storage for one rollout, laid out (envs, steps) as GAE wants it, the flat batch the
optimiser reads from it, and how the envs are grouped while it is sampled (`acting_groups`; what a
resume's regrouping changes of it: `ppo.checkpoint.regrouping_notes`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from configs.ppo import PPOConfig
from ppo.gae import compute_gae


def acting_groups(config: PPOConfig) -> list[tuple[range, slice]]:
    """The worker processes, and their games, that the network acts for in one forward pass: with
    overlapped sampling (≥ 2 workers) the first half of the workers and then the rest, else all of
    them at once. The batch's size changes the last bits of the logits (the matrix products block
    differently), so two groupings of the same games learn bit for bit alike only when these games
    match: for 8 games every grouping but 1 × 8 splits them 4 and 4."""
    workers, games = config.n_workers, config.n_envs
    if not (config.overlap_sampling and workers >= 2):
        return [(range(workers), slice(0, games))]
    half, per_worker = workers // 2, games // workers
    return [(range(0, half), slice(0, half * per_worker)), (range(half, workers), slice(half * per_worker, games))]


class Batch(NamedTuple):
    """Transitions as (B, …) tensors; the whole rollout, or one minibatch of it."""

    observations: torch.Tensor  # uint8 (B, frame_stack, 84, 84)
    actions: torch.Tensor  # int64 (B,)
    log_probs: torch.Tensor  # log π_old(a|s), the sampling policy's
    values: torch.Tensor  # V_old(s), the critic's estimate while sampling
    advantages: torch.Tensor  # GAE(γ, λ)
    returns: torch.Tensor  # advantages + values: the critic's target

    def minibatches(self, order: torch.Tensor, size: int) -> Iterator[Batch]:
        """Consecutive slices of `order` (a permutation), each gathered into a minibatch."""
        for indices in order.split(size):
            yield Batch(*(take_rows(field, indices) for field in self))


def take_rows(field: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """`field[indices]` along the first dimension, bit for bit and in the same memory format.

    Each sample is one block of memory in both layouts the frames use (NCHW, and NHWC for
    channels-last), so it is copied as one row of bytes with `index_select`; `field[indices]` would
    copy element by element, several times slower (docs/benchmarks.md, "What each choice in the loop buys")."""
    if field.dim() == 4 and not field.is_contiguous() and field.is_contiguous(memory_format=torch.channels_last):
        nhwc = field.permute(0, 2, 3, 1)  # a contiguous view: one sample's H × W × C bytes per row
        rows = nhwc.reshape(len(field), -1).index_select(0, indices)
        return rows.view(len(indices), *nhwc.shape[1:]).permute(0, 3, 1, 2)
    return field.index_select(0, indices)


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

    def batch(self, gamma: float, gae_lambda: float, device: torch.device, channels_last: bool) -> Batch:
        """GAE over the rollout, then the whole of it as one flat batch on `device` (moved once per
        update; with `channels_last` the frames are laid out NHWC once, and minibatch gathers keep it)."""
        self.advantages[:], self.returns[:] = compute_gae(
            self.rewards, self.values, self.terminals, self.truncations, self.truncation_values,
            self.last_values, gamma, gae_lambda,
        )

        def flat(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array.reshape(self.size, *array.shape[2:])).to(device, non_blocking=True)

        observations = flat(self.observations)
        if channels_last:
            observations = observations.contiguous(memory_format=torch.channels_last)
        return Batch(observations, flat(self.actions), flat(self.log_probs), flat(self.values), flat(self.advantages), flat(self.returns))
