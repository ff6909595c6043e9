"""The two-sided tests behind the learning-curve comparisons, against values worked out by hand."""

import math

import pytest

from experiments.seed_stats import chance_to_hold, compare, non_inferiority, permutation_p, seeds_needed, t_cdf, t_quantile


def test_t_cdf_with_one_degree_of_freedom_is_the_cauchy_cdf() -> None:
    # df = 1 is the Cauchy distribution: P(T ≤ t) = 1/2 + atan(t)/π, so P(T ≤ 1) = 3/4.
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-6)
    assert t_cdf(-1.0, 1) == pytest.approx(0.25, abs=1e-6)
    assert t_cdf(0.0, 7) == 0.5


def test_t_quantiles_match_the_printed_tables() -> None:
    # The two-sided 95% critical values of any t table: 12.706 (df 1), 2.776 (df 4), 2.228 (df 10).
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)


def test_permutation_p_counts_every_split() -> None:
    # Pooled 1, 2, 3, 4 split into pairs: 6 ways; the mean differences ±2 (the observed one and its
    # mirror) are as extreme as observed, so p = 2/6.
    import numpy as np
    assert permutation_p(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == pytest.approx(1 / 3)


def test_welch_interval_worked_by_hand() -> None:
    # A = 1, 2, 3 and B = 4, 5, 6: difference 3; each side's variance of the mean 1/3, so
    # se = √(2/3) = 0.8165, t = 3.674; Welch's df = (2/3)² / (2 · (1/3)² / 2) = 4;
    # half-width 2.776 · 0.8165 = 2.267; exact permutation: 2 of the 20 splits.
    c = compare([1, 2, 3], [4, 5, 6])
    assert c.difference == pytest.approx(3.0)
    assert c.df == pytest.approx(4.0)
    assert c.t == pytest.approx(3 / math.sqrt(2 / 3))
    assert (c.low, c.high) == (pytest.approx(3 - 2.2670, abs=1e-3), pytest.approx(3 + 2.2670, abs=1e-3))
    assert c.p_welch == pytest.approx(0.0213, abs=1e-3)
    assert c.p_permutation == pytest.approx(0.1)
    assert c.line().startswith("+3.0 [+0.7, +5.3]")


def test_a_single_seed_has_no_spread_to_test() -> None:
    with pytest.raises(ValueError, match="at least 2 seeds a side"):
        compare([1.0], [2.0, 3.0])


def test_non_inferiority_worked_by_hand() -> None:
    # a = 1, 2, 3 and b = 2, 3, 4: difference +1, each variance 1, se = √(1/3 + 1/3) = 0.8165,
    # Welch df = (2/3)² / ((1/3)²/2 · 2) = 4; the one-sided 95% t at df 4 is 2.1318 (tables), so the
    # lower bound is 1 − 2.1318 × 0.8165 = −0.7406: no worse by 1, not shown no worse by 0.5.
    test = non_inferiority([1, 2, 3], [2, 3, 4], margin=1.0)
    assert test.difference == pytest.approx(1.0) and test.low == pytest.approx(-0.7406, abs=1e-3)
    assert test.holds and not non_inferiority([1, 2, 3], [2, 3, 4], margin=0.5).holds


def test_seeds_needed_worked_by_hand() -> None:
    # z(0.95) + z(0.8) = 1.644854 + 0.841621 = 2.486475, squared 6.182557.
    assert seeds_needed(2.0, 2.0, 1.0) == 50  # 6.182557 × 8 / 1 = 49.46
    assert seeds_needed(2.5, 1.0, 1.25) == 29  # 6.182557 × 7.25 / 1.5625 = 28.69
    assert seeds_needed(2.0, 2.0, 4.0) == 4  # 49.46 / 16 = 3.09


def test_chance_to_hold_worked_by_hand() -> None:
    # sd 2 a side, 50 seeds: se = √(8 / 50) = 0.4; z(0.95) = 1.644854; the test holds when the final
    # difference lies above −1 + 1.644854 × 0.4 = −0.342058 (margin 1).
    # No seed in hand: the final difference's spread is √(50 × 4 + 50 × 4) / 50 = 0.4. Alike
    # (difference 0): Φ(0.342058 / 0.4) = Φ(0.855146) = 0.80376, at least the 80% that
    # seeds_needed(2, 2, 1) = 50 was worked out for; lower by the margin: Φ(−1.644854) = 0.05.
    assert chance_to_hold(0.0, 2.0, 2.0, 1.0, 50) == pytest.approx(0.80376, abs=1e-4)
    assert chance_to_hold(-1.0, 2.0, 2.0, 1.0, 50) == pytest.approx(0.05, abs=1e-6)
    # 25 a side measured, 0.6 lower: the 25 to come move the final difference by
    # √(25 × 4 + 25 × 4) / 50 = 0.282843, so Φ((−0.6 + 0.342058) / 0.282843) = Φ(−0.911964) = 0.18089.
    assert chance_to_hold(-0.6, 2.0, 2.0, 1.0, 50, have=(25, 25)) == pytest.approx(0.18089, abs=1e-4)
    # Every seed in hand: nothing left to move it, so 1 above −0.342058 and 0 below.
    assert (chance_to_hold(-0.3, 2.0, 2.0, 1.0, 50, have=(50, 50)), chance_to_hold(-0.4, 2.0, 2.0, 1.0, 50, have=(50, 50))) == (1.0, 0.0)
