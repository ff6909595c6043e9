"""An iteration's hyperparameters: the live values (changeable while the run goes) annealed by how
far the run has got, and checked against their ranges before they reach the model.

A live value that arrives from outside (the dashboard, a checkpoint) is checked where it arrives
(experiments/run/labml/live.py), and a refused one reported there; `check_settings` is the learner's
own refusal of whatever reaches it anyway."""

from __future__ import annotations

import math
from dataclasses import dataclass

from configs.ppo import LiveValues, PPOConfig, live_value_problem


@dataclass(frozen=True)
class IterationSettings:
    """The hyperparameters one iteration uses: live values read once, annealing applied."""

    learning_rate: float
    clip_range: float  # policy ratio clip ε
    value_clip_range: float | None  # None: the value loss is not clipped
    value_coef: float
    entropy_coef: float
    epochs: int


def annealed(live: LiveValues, config: PPOConfig, update: int) -> IterationSettings:
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
