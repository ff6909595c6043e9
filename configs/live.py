"""Hyperparameters that can change while a run goes (labml dynamic hyperparameters).

The dashboard (or `experiments.tweak`) sends a new value; labml's client applies it to the
`DynamicHyperParam` registered under that key; the trainer reads `values()` at every update.
A live learning rate or clip range replaces the *base* of its schedule: the value used at update
u is base × (1 − u / n_updates) when annealing is on, so a change keeps annealing from there.
"""

from __future__ import annotations

import warnings
from typing import Any

# labml 0.5 keeps these in an internal module (labml.configs no longer re-exports them).
from labml.internal.configs.dynamic_hyperparam import (
    DynamicHyperParam,
    FloatDynamicHyperParam,
    IntDynamicHyperParam,
)

from configs.ppo import PPOConfig, live_ranges


def _peek(param: DynamicHyperParam) -> tuple[Any, bool]:
    """(the value `param` holds now, whether labml has registered it), without tracking the value.

    labml 0.5 has no public getter: calling the param returns its value but also tracks it as
    `hp.<key>`, and warns while it is not registered with `experiment.configs`.  This is the one
    place that reads its private state (`_value`, `_key`); recheck it when upgrading labml.
    """
    return param._value, param._key is not None


class LiveHyperParams:
    def __init__(self, config: PPOConfig, overrides: dict[str, float] | None = None) -> None:
        self.params: dict[str, DynamicHyperParam] = {}
        for name, (low, high) in live_ranges().items():
            default = getattr(config, name)
            if isinstance(default, int):
                self.params[name] = IntDynamicHyperParam(default, (int(low), int(high)))
            else:
                self.params[name] = FloatDynamicHyperParam(default, (low, high))
        if overrides:  # values changed live in an earlier session of a resumed run
            with warnings.catch_warnings():
                # set_value warns that the param is not registered yet: `experiment.configs` does that later.
                warnings.filterwarnings("ignore", message="Register dynamic schedules", category=UserWarning)
                for name, value in overrides.items():
                    self.params[name].set_value(value)

    def values(self) -> dict[str, Any]:
        """Current values; calling a registered param also tracks it as `hp.<name>`."""
        current = {}
        for name, param in self.params.items():
            value, registered = _peek(param)
            current[name] = param() if registered else value
        return current

    def bases(self) -> dict[str, Any]:
        """Current values without tracking them: what a checkpoint keeps for a resume."""
        return {name: _peek(param)[0] for name, param in self.params.items()}

    def labml_configs(self, config: PPOConfig) -> dict[str, Any]:
        """The whole config for `experiment.configs`, the live keys as DynamicHyperParams."""
        values: dict[str, Any] = config.to_dict()
        values.update(self.params)
        return values
