"""GAE against values worked out by hand."""

import numpy as np
import pytest

from ppo.gae import compute_gae


def _row(*values: float) -> np.ndarray:
    return np.array([values], dtype=np.float32)


def test_hand_computed_example_with_episode_end() -> None:
    # γ = λ = 0.5; the episode ends on the transition at t=1.
    # t=2: δ = 2 + 0.5·4.0 − 0 = 4          → A = 4
    # t=1: δ = 0 + 0 (terminal) − 1.0 = −1   → A = −1 (nothing flows back across the end)
    # t=0: δ = 1 + 0.5·1.0 − 0.5 = 1         → A = 1 + 0.25·(−1) = 0.75
    advantages, returns = compute_gae(
        rewards=_row(1, 0, 2), values=_row(0.5, 1.0, 0.0),
        terminals=np.array([[False, True, False]]), truncations=np.zeros((1, 3), bool),
        truncation_values=np.zeros((1, 3), np.float32), last_values=np.array([4.0], np.float32),
        gamma=0.5, gae_lambda=0.5,
    )
    np.testing.assert_allclose(advantages, [[0.75, -1.0, 4.0]])
    np.testing.assert_allclose(returns, [[1.25, 0.0, 4.0]])


def test_truncation_bootstraps_from_the_truncated_state_and_stops_the_trace() -> None:
    # Same rollout, but at t=1 the time limit cut the episode; V(final obs) = 2.0.
    # t=1: δ = 0 + 0.5·2.0 − 1.0 = 0 → A = 0 (λ-trace cut: A_2 belongs to the next game)
    # t=0: δ = 1 + 0.5·1.0 − 0.5 = 1 → A = 1 + 0.25·0 = 1
    advantages, _ = compute_gae(
        rewards=_row(1, 0, 2), values=_row(0.5, 1.0, 0.0),
        terminals=np.zeros((1, 3), bool), truncations=np.array([[False, True, False]]),
        truncation_values=_row(0.0, 2.0, 0.0), last_values=np.array([4.0], np.float32),
        gamma=0.5, gae_lambda=0.5,
    )
    np.testing.assert_allclose(advantages, [[1.0, 0.0, 4.0]])


def test_no_episode_end_is_discounted_sum_of_deltas() -> None:
    # λ = 1, γ = 1, no ends: A_t = Σ r − V_t + V_last
    advantages, returns = compute_gae(
        rewards=_row(1, 1, 1), values=_row(0.0, 0.0, 0.0), terminals=np.zeros((1, 3), bool),
        truncations=np.zeros((1, 3), bool), truncation_values=np.zeros((1, 3), np.float32),
        last_values=np.array([10.0], np.float32), gamma=1.0, gae_lambda=1.0,
    )
    np.testing.assert_allclose(advantages, [[13.0, 12.0, 11.0]])
    np.testing.assert_allclose(returns, advantages)


def test_workers_are_independent() -> None:
    rng = np.random.default_rng(0)
    shape = (3, 7)
    args = dict(rewards=rng.normal(size=shape).astype(np.float32), values=rng.normal(size=shape).astype(np.float32),
                terminals=rng.random(shape) < 0.2, truncations=rng.random(shape) < 0.1,
                truncation_values=rng.normal(size=shape).astype(np.float32),
                last_values=rng.normal(size=3).astype(np.float32), gamma=0.9, gae_lambda=0.8)
    together, _ = compute_gae(**args)
    for w in range(3):
        alone, _ = compute_gae(**{k: (v[w:w + 1] if isinstance(v, np.ndarray) else v) for k, v in args.items()})
        np.testing.assert_allclose(together[w:w + 1], alone, rtol=1e-6)


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(AssertionError, match="values"):
        compute_gae(_row(1, 2), _row(1, 2, 3), np.zeros((1, 2), bool), np.zeros((1, 2), bool),
                    np.zeros((1, 2), np.float32), np.zeros(1, np.float32), 0.9, 0.9)
