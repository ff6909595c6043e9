"""Minibatches are gathered from the rollout as rows of memory (`take_rows`): the same values and
the same memory format as indexing sample by sample."""

from __future__ import annotations

import pytest
import torch

from ppo.rollout import Batch, take_rows


def _frames(channels_last: bool) -> torch.Tensor:
    # 6 samples of 2 × 3 × 3 bytes, every byte distinct (0 … 107), so a misplaced byte shows.
    frames = torch.arange(6 * 2 * 3 * 3, dtype=torch.uint8).view(6, 2, 3, 3)
    return frames.contiguous(memory_format=torch.channels_last) if channels_last else frames


@pytest.mark.parametrize("channels_last", [False, True])
def test_take_rows_is_indexing_sample_by_sample(channels_last: bool) -> None:
    frames = _frames(channels_last)
    indices = torch.tensor([4, 0, 5, 4])  # out of order, one twice
    taken = take_rows(frames, indices)
    # Sample j is frames[indices[j]]: for the NCHW values, sample 4 holds bytes 72 … 89 in C, H, W order.
    assert torch.equal(taken[0].flatten(), torch.arange(72, 90, dtype=torch.uint8))
    assert torch.equal(taken, torch.stack([frames[i] for i in indices.tolist()]))
    assert taken.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert taken.is_contiguous() != channels_last


def test_a_batch_gathers_every_field_by_the_same_rows() -> None:
    frames = _frames(channels_last=True)
    numbers = torch.arange(6, dtype=torch.float32)
    batch = Batch(frames, torch.arange(6) * 10, numbers + 0.5, numbers + 0.25, -numbers, numbers * 2)
    order = torch.tensor([3, 1, 0, 5, 2, 4])
    first, second = batch.minibatches(order, 4)
    assert first.actions.tolist() == [30, 10, 0, 50] and second.actions.tolist() == [20, 40]
    assert first.log_probs.tolist() == [3.5, 1.5, 0.5, 5.5] and second.returns.tolist() == [4.0, 8.0]
    assert torch.equal(second.observations, frames[[2, 4]])
    assert second.observations.is_contiguous(memory_format=torch.channels_last)
