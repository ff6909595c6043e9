"""Hyperparameters that can change while a run goes (labml dynamic hyperparameters).

The dashboard (or `experiments.tweak`) sends a new value; labml's client applies it to the
`DynamicHyperParam` registered under that key; the trainer reads `values()` at every update.
A live learning rate or clip range replaces the *base* of its schedule: the value used at update
u is base × (1 − u / n_updates) when annealing is on, so a change keeps annealing from there.

A value is checked before labml applies it (`_CheckedParam.set_value`, with configs/ppo.py's
`accepted_live_values`): labml tracks whatever its param holds as `hp.<key>` and fails on
anything but a number, so a dashboard sending `"x"` would otherwise end the run inside labml.
A refused value never reaches the param; `values()` hands it to the trainer once instead, whose
own check refuses and reports it.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

# labml 0.5 keeps these in an internal module (labml.configs no longer re-exports them).
from labml.internal.configs.dynamic_hyperparam import DynamicHyperParam

from configs.ppo import PPOConfig, accepted_live_values, live_ranges


def _peek(param: DynamicHyperParam) -> tuple[Any, bool]:
    """(the value `param` holds now, whether labml has registered it), without tracking the value.

    labml 0.5 has no public getter: calling the param returns its value but also tracks it as
    `hp.<key>`, and warns while it is not registered with `experiment.configs`.  This is the one
    place that reads its private state (`_value`, `_key`); recheck it when upgrading labml.
    """
    return param._value, param._key is not None


class _CheckedParam(DynamicHyperParam):
    """The live hyperparameter `name`, taking only what configs/ppo.py allows for it; a refused
    value is kept aside (`take_refused`) and the param keeps the value it had. `set_value` runs on
    labml's sender thread, `take_refused` on the trainer's."""

    def __init__(self, name: str, default: float, range_: tuple[float, float]) -> None:
        integral = isinstance(default, int)
        super().__init__(default, "int" if integral else "float", (int(range_[0]), int(range_[1])) if integral else range_)
        self.name = name
        self._refused: list[Any] = []
        self._lock = threading.Lock()

    def set_value(self, value: Any) -> None:
        accepted, _ = accepted_live_values({self.name: value}, fallback={})
        if self.name in accepted:
            super().set_value(accepted[self.name])  # an int for an integral one, as labml's own
        else:
            with self._lock:
                self._refused.append(value)

    def take_refused(self) -> list[Any]:
        with self._lock:
            refused, self._refused = self._refused, []
        return refused


class LiveHyperParams:
    def __init__(self, config: PPOConfig, overrides: dict[str, float] | None = None) -> None:
        self.params = {name: _CheckedParam(name, getattr(config, name), range_) for name, range_ in live_ranges().items()}
        if overrides:  # values changed live in an earlier session of a resumed run
            with warnings.catch_warnings():
                # set_value warns that the param is not registered yet: `experiment.configs` does that later.
                warnings.filterwarnings("ignore", message="Register dynamic schedules", category=UserWarning)
                for name, value in overrides.items():
                    self.params[name].set_value(value)

    def values(self) -> dict[str, Any]:
        """Current values; calling a registered param also tracks it as `hp.<name>`.  Where a value
        was refused since the last call, that value instead (untracked), for the trainer to refuse
        and report; the param still holds the good one, which the next call returns."""
        current = {}
        for name, param in self.params.items():
            value, registered = _peek(param)
            refused = param.take_refused()
            current[name] = refused[-1] if refused else param() if registered else value
        return current

    def bases(self) -> dict[str, Any]:
        """Current values without tracking them: what a checkpoint keeps for a resume."""
        return {name: _peek(param)[0] for name, param in self.params.items()}

    def labml_configs(self, config: PPOConfig) -> dict[str, Any]:
        """The whole config for `experiment.configs`, the live keys as DynamicHyperParams."""
        values: dict[str, Any] = config.to_dict()
        values.update(self.params)
        return values
