"""The actor-critic: shapes, initialisation, and that the fast memory layout learns the same."""

import math

import pytest
import torch

from ppo.losses import clipped_policy_loss, clipped_value_loss, entropy_bonus
from ppo.model import ActorCritic, sample_actions


def test_shapes_and_uint8_input() -> None:
    model = ActorCritic(n_actions=6)
    logits, values = model(torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8))
    assert logits.shape == (5, 6) and values.shape == (5,)
    with pytest.raises(TypeError, match="uint8"):
        model(torch.zeros(1, 4, 84, 84))


def test_initialisation() -> None:
    torch.manual_seed(0)
    model = ActorCritic(n_actions=4)
    # Orthogonal rows: W Wᵀ = gain² I for the (4, 512) policy head with gain 0.01.
    w = model.policy.weight
    torch.testing.assert_close(w @ w.T, 0.01 ** 2 * torch.eye(4), atol=1e-7, rtol=1e-4)
    v = model.value.weight
    assert (v @ v.T).item() == pytest.approx(1.0, rel=1e-5)
    conv = model.trunk[0].weight.flatten(1)  # (32, 256): orthogonal rows with gain √2
    torch.testing.assert_close(conv @ conv.T, 2.0 * torch.eye(32), atol=1e-4, rtol=1e-4)
    assert all(torch.count_nonzero(m.bias) == 0 for m in model.modules() if hasattr(m, "bias") and m.bias is not None)
    # A near-uniform first policy: entropy close to log(4).
    logits, _ = model(torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8))
    assert entropy_bonus(logits).item() == pytest.approx(math.log(4), abs=1e-3)


def _loss_and_grads(model: ActorCritic, observations, actions, old_log_probs, advantages, old_values, returns):
    logits, values = model(observations)
    log_probs = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
    loss = (clipped_policy_loss(log_probs, old_log_probs, advantages, 0.1).loss
            + 0.5 * clipped_value_loss(values, old_values, returns, 0.1).loss - 0.01 * entropy_bonus(logits))
    model.zero_grad()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_channels_last_gives_the_same_losses_and_gradients() -> None:
    torch.manual_seed(1)
    plain = ActorCritic(4)
    fast = ActorCritic(4, channels_last=True)
    fast.load_state_dict(plain.state_dict())
    batch = 64
    observations = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    data = (observations, torch.randint(0, 4, (batch,)), torch.randn(batch) - 1.4, torch.randn(batch),
            torch.randn(batch), torch.randn(batch))
    loss_plain, grads_plain = _loss_and_grads(plain, *data)
    loss_fast, grads_fast = _loss_and_grads(fast, *data)
    torch.testing.assert_close(loss_fast, loss_plain, rtol=1e-5, atol=1e-6)
    for g_fast, g_plain in zip(grads_fast, grads_plain, strict=True):
        # Summation order differs between layouts: tolerance of float32 accumulation, not exactness.
        torch.testing.assert_close(g_fast, g_plain, rtol=1e-4, atol=1e-5)


def test_gumbel_max_sampling_matches_the_softmax() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]])).expand(40_000, 4)
    generator = torch.Generator().manual_seed(0)
    counts = torch.bincount(sample_actions(logits, generator), minlength=4).float() / 40_000
    torch.testing.assert_close(counts, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.01, rtol=0)
