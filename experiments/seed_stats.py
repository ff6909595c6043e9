"""Is the gap between two sets of seeds real? A two-sided test and its interval, for the tables of
`experiments.curves` when two settings sit side by side.

Two tests, because five seeds a side is little data and each test is wrong in its own way:

* Welch's t: the difference of the means, its 95% interval and a two-sided p, without assuming the
  two sides share a variance (a change of precision or of a clip can change the seed spread too).
  It assumes each side's seed scores are roughly normal.
* The exact permutation test: every way of splitting the pooled scores into two groups of the
  same sizes (252 for 5 against 5), and the share of splits whose mean difference is at least as
  large as the observed one. It assumes nothing about the shape of the scores, only that the seeds
  are exchangeable when the setting makes no difference; its smallest p is 2 / that count.

numpy only: the t distribution's quantile is found by bisection on its CDF, integrated with
Simpson's rule (exact to ~1e-9 for the degrees of freedom seed counts give).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class Comparison:
    """B against A: `difference` = mean(B) − mean(A), with Welch's 95% interval and both p-values."""
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    difference: float
    low: float
    high: float
    t: float
    df: float
    p_welch: float
    p_permutation: float

    def line(self) -> str:
        return (f"{self.difference:+.1f} [{self.low:+.1f}, {self.high:+.1f}] "
                f"(Welch t {self.t:+.2f}, df {self.df:.1f}, p {self.p_welch:.2f}; permutation p {self.p_permutation:.2f})")


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` degrees of freedom."""
    if t == 0:
        return 0.5
    x = np.linspace(0.0, abs(t), 4001)  # an even number of intervals, as Simpson's rule needs
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    pdf = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df))
    h = x[1] - x[0]
    area = h / 3 * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())
    return 0.5 + math.copysign(float(area), t)


def t_quantile(q: float, df: float) -> float:
    """The t with P(T ≤ t) = q, by bisection (the CDF is monotone)."""
    low, high = -1e3, 1e3
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < q else (low, mid)
    return (low + high) / 2


def permutation_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided exact permutation p of the mean difference (all splits of the pooled scores)."""
    pooled = np.concatenate([a, b])
    observed = abs(b.mean() - a.mean())
    total, extreme = 0, 0
    for chosen in combinations(range(len(pooled)), len(b)):
        mask = np.zeros(len(pooled), dtype=bool)
        mask[list(chosen)] = True
        total += 1
        # A tolerance, so that a split equal to the observed one is counted despite rounding.
        extreme += abs(pooled[mask].mean() - pooled[~mask].mean()) >= observed - 1e-12
    return extreme / total


def compare(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Comparison:
    """B against A over seeds; each side needs ≥ 2 seeds (a variance)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(xa) < 2 or len(xb) < 2:
        raise ValueError(f"a two-sided test needs at least 2 seeds a side, got {len(xa)} and {len(xb)}")
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    difference = float(xb.mean() - xa.mean())
    se = math.sqrt(va + vb)
    if se == 0:  # every seed of both sides equal: no spread to test against
        return Comparison(len(xa), len(xb), float(xa.mean()), float(xb.mean()), difference, difference, difference,
                          math.inf if difference else 0.0, math.inf, 0.0 if difference else 1.0, permutation_p(xa, xb))
    # Welch–Satterthwaite degrees of freedom.
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    t = difference / se
    half = t_quantile(0.5 + confidence / 2, df) * se
    p = 2 * (1 - t_cdf(abs(t), df))
    return Comparison(len(xa), len(xb), float(xa.mean()), float(xb.mean()), difference, difference - half,
                      difference + half, t, df, p, permutation_p(xa, xb))


@dataclass(frozen=True)
class NonInferiority:
    """Is B no worse than A by more than `margin`? `low` is the one-sided lower confidence bound of
    mean(B) − mean(A) (Welch); B is non-inferior when it lies above −margin."""
    difference: float
    low: float
    margin: float

    @property
    def holds(self) -> bool:
        return self.low > -self.margin


def non_inferiority(a: Sequence[float], b: Sequence[float], margin: float, confidence: float = 0.95) -> NonInferiority:
    """The one-sided test of B against A at `margin` (a two-sided interval at 1 − 2(1 − confidence)
    has the same lower end: 90% two-sided for the usual 95% one-sided)."""
    two_sided = compare(a, b, confidence=1 - 2 * (1 - confidence))
    return NonInferiority(two_sided.difference, two_sided.low, margin)


def seeds_needed(sd_a: float, sd_b: float, margin: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """Seeds a side for the one-sided test at `margin` to hold with probability `power` when the
    two sides truly learn alike: n = (z_confidence + z_power)² (sd_a² + sd_b²) / margin² (normal
    approximation; the t's heavier tails need a seed or two more at small n)."""
    z = NormalDist().inv_cdf(confidence) + NormalDist().inv_cdf(power)
    return math.ceil(z * z * (sd_a ** 2 + sd_b ** 2) / margin ** 2)


def chance_to_hold(difference: float, sd_a: float, sd_b: float, margin: float, seeds: int, have: tuple[int, int] = (0, 0),
                   confidence: float = 0.95) -> float:
    """The probability that the one-sided test at `margin` holds once each side has `seeds`, given
    the `have` seeds a side already measured, if the true mean(B) − mean(A) is the `difference`
    they measured (conditional power under the current trend; normal approximation, the spreads
    as measured). With N = `seeds`, side a's final mean is (n_a / N)·(its mean now) + the mean of
    N − n_a new seeds, so the final difference is about normal around `difference` with variance
    ((N − n_a)·sd_a² + (N − n_b)·sd_b²) / N², and the test holds when it lies above
    −margin + z·√((sd_a² + sd_b²) / N). With no seeds in hand and a difference of 0, this is
    `seeds_needed`'s power; with every seed in hand, 1 or 0."""
    seeds = max(seeds, *have)
    threshold = -margin + NormalDist().inv_cdf(confidence) * math.sqrt((sd_a ** 2 + sd_b ** 2) / seeds)
    spread = math.sqrt((seeds - have[0]) * sd_a ** 2 + (seeds - have[1]) * sd_b ** 2) / seeds
    if spread == 0:
        return float(difference > threshold)
    return NormalDist().cdf((difference - threshold) / spread)


__all__ = ["Comparison", "NonInferiority", "chance_to_hold", "compare", "non_inferiority", "permutation_p", "seeds_needed",
           "t_cdf", "t_quantile"]
