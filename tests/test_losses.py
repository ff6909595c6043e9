"""The PPO losses on tiny vectors worked out by hand."""

import math

import pytest
import torch

from ppo.losses import clipped_policy_loss, clipped_value_loss, entropy_bonus, explained_variance


def test_policy_loss_by_hand() -> None:
    # ratio [1.5, 0.5], A [1, −1], ε 0.2: clipped ratio [1.2, 0.8];
    # min(rA, clip(r)A) = [min(1.5, 1.2), min(−0.5, −0.8)] = [1.2, −0.8]; mean 0.2 → loss −0.2.
    ratio = torch.tensor([1.5, 0.5])
    old = torch.tensor([-1.0, -2.0])
    result = clipped_policy_loss(old + ratio.log(), old, torch.tensor([1.0, -1.0]), clip_range=0.2)
    assert result.loss.item() == pytest.approx(-0.2)
    assert result.clip_fraction.item() == pytest.approx(1.0)
    # KL estimate (r − 1) − log r: [0.5 − log 1.5, −0.5 − log 0.5] averaged
    expected_kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert result.approx_kl.item() == pytest.approx(expected_kl, rel=1e-5)


def test_policy_loss_inside_the_clip_is_plain_surrogate() -> None:
    ratio = torch.tensor([1.05, 0.95])
    result = clipped_policy_loss(ratio.log(), torch.zeros(2), torch.tensor([2.0, 1.0]), clip_range=0.1)
    assert result.loss.item() == pytest.approx(-(1.05 * 2 + 0.95 * 1) / 2)
    assert result.clip_fraction.item() == 0.0


def test_policy_gradient_vanishes_where_clipped() -> None:
    log_probs = torch.tensor([math.log(1.5), math.log(0.5)], requires_grad=True)
    clipped_policy_loss(log_probs, torch.zeros(2), torch.tensor([1.0, -1.0]), 0.2).loss.backward()
    assert log_probs.grad is not None
    assert torch.equal(log_probs.grad, torch.zeros(2))


def test_value_loss_by_hand() -> None:
    # V [2, 0], V_old [1, 0], R [3, 1], ε 0.5: clipped V [1.5, 0];
    # max((V−R)², (Vc−R)²) = [max(1, 2.25), max(1, 1)] = [2.25, 1]; ½·mean = 0.8125
    values, old, returns = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0]), torch.tensor([3.0, 1.0])
    clipped = clipped_value_loss(values, old, returns, 0.5)
    assert clipped.loss.item() == pytest.approx(0.8125)
    assert clipped.clip_fraction.item() == 0.5  # the first sample's gradient is the clipped term's: none
    unclipped = clipped_value_loss(values, old, returns, None)
    assert unclipped.loss.item() == pytest.approx(0.5)
    assert unclipped.clip_fraction.item() == 0.0


def test_value_clip_fraction_counts_exactly_the_samples_without_a_gradient() -> None:
    # V [2, 2], V_old [1, 1], R [3, 0], ε 0.5: both moved 1 > ε, so clipped V = [1.5, 1.5].
    # Sample 0: (V−R)² = 1 < (Vc−R)² = 2.25, the constant clipped term wins: gradient 0, counted.
    # Sample 1: (V−R)² = 4 > (Vc−R)² = 2.25, the unclipped term wins: d(½·mean)/dV = ½·½·2(2−0) = 1.
    # Loss ½·mean(2.25, 4) = 1.5625.
    values = torch.tensor([2.0, 2.0], requires_grad=True)
    result = clipped_value_loss(values, torch.tensor([1.0, 1.0]), torch.tensor([3.0, 0.0]), 0.5)
    result.loss.backward()
    assert result.loss.item() == pytest.approx(1.5625)
    assert values.grad is not None and values.grad.tolist() == [0.0, 1.0]
    assert result.clip_fraction.item() == 0.5
    # Inside the clip (|V − V_old| ≤ ε) nothing is counted, whichever way V moved.
    inside = clipped_value_loss(torch.tensor([1.2, 0.8]), torch.tensor([1.0, 1.0]), torch.tensor([3.0, 0.0]), 0.5)
    assert inside.clip_fraction.item() == 0.0


def test_shape_guard_refuses_broadcasting() -> None:
    with pytest.raises(ValueError, match="equal 1-D shapes"):
        clipped_value_loss(torch.zeros(4, 1), torch.zeros(4), torch.zeros(4), 0.1)
    with pytest.raises(ValueError, match="equal 1-D shapes"):
        clipped_policy_loss(torch.zeros(4), torch.zeros(4), torch.zeros(4, 1), 0.1)


def test_entropy_of_uniform_policy_is_log_n() -> None:
    assert entropy_bonus(torch.zeros(3, 4)).item() == pytest.approx(math.log(4))


def test_explained_variance() -> None:
    targets = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(targets, targets) == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), targets) == pytest.approx(0.0)
