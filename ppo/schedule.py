"""An iteration's hyperparameters: the live values (changeable while the run goes) checked against
their ranges, then annealed by how far the run has got."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from configs.ppo import PPOConfig, accepted_live_values, live_ranges, live_value_problem


@dataclass(frozen=True)
class IterationSettings:
    """The hyperparameters one iteration uses: live values read once, annealing applied."""

    learning_rate: float
    clip_range: float  # policy ratio clip ε
    value_clip_range: float | None  # None: the value loss is not clipped
    value_coef: float
    entropy_coef: float
    epochs: int


def annealed(live: dict[str, Any], config: PPOConfig, update: int) -> IterationSettings:
    """The settings of the iteration after `update` completed ones: the annealed values decayed linearly."""
    remaining = 1.0 - update / config.n_updates
    clip_range = live["clip_range"] * (remaining if config.anneal_clip_range else 1.0)
    return IterationSettings(
        learning_rate=live["learning_rate"] * (remaining if config.anneal_learning_rate else 1.0),
        # Tied to the annealed policy clip (ppo2), the value clip shrinks to 0 late in a run and
        # freezes the critic; a fixed `value_clip_range` (the default) keeps it learning to the end.
        clip_range=clip_range, value_clip_range=config.value_clip_for(clip_range),
        value_coef=live["value_coef"], entropy_coef=live["entropy_coef"], epochs=int(live["epochs"]),
    )


def check_settings(settings: IterationSettings) -> None:
    """Refuse settings outside the live ranges before they touch the model (they may come from
    anywhere, not only from `annealed`). Annealed values lie in [0, base], so the ranges hold."""
    for name in ("learning_rate", "clip_range", "value_coef", "entropy_coef", "epochs"):
        value = getattr(settings, name)
        if (problem := live_value_problem(name, value)) is not None:
            raise ValueError(f"refusing to optimise with {name} = {value!r}: expected {problem}")
    if settings.value_clip_range is not None and not (math.isfinite(settings.value_clip_range) and settings.value_clip_range >= 0):
        raise ValueError(f"refusing to optimise with value_clip_range = {settings.value_clip_range!r}: expected a finite number ≥ 0")


class LiveValueGuard:
    """The live values last applied, and the refused ones, each reported once: whatever a
    dashboard or a checkpoint says, a value configs/ppo.py does not allow (a negative learning
    rate, a million epochs) is never applied; the last good one is kept instead."""

    def __init__(self, config: PPOConfig) -> None:
        self.in_use: dict[str, Any] = {k: getattr(config, k) for k in live_ranges()}
        self.refused: dict[str, Any] = {}  # name -> the refused value already reported

    def checked(self, received: dict[str, Any], report: Callable[[str], None]) -> dict[str, Any]:
        good, problems = accepted_live_values(received, fallback=self.in_use)
        for name in live_ranges():
            if name not in problems:
                self.refused.pop(name, None)
            elif name not in self.refused or repr(self.refused[name]) != repr(received[name]):  # once per value (NaN too)
                self.refused[name] = received[name]
                report(f"refused live value {name} = {received[name]!r}: expected {problems[name]}; keeping {good[name]!r}")
        self.in_use = good
        return good
