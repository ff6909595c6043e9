"""The live hyperparameters as labml dynamic hyperparameters, each refusing what the rule refuses.

The dashboard (or `experiments.tweak`) sends a new value; labml's sender thread applies it to the
`DynamicHyperParam` registered under that key; the trainer reads `values()` at every update. A
live learning rate or clip range replaces the *base* of its schedule: the value used at update u
is base × (1 − u / n_updates) when annealing is on, so a change keeps annealing from there.

A value is checked before labml applies it, with configs/ppo.py's `accepted_live_values`: labml
tracks whatever its param holds as `hp.<key>` and fails on anything but a number, so a dashboard
sending `"x"` would otherwise end the run inside labml. Each value received is reported where it
arrives (`say`), in the run's words: applied from the next update, or refused (the param then
keeps the value it had).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

# labml 0.5 keeps these in an internal module (labml.configs no longer re-exports them).
from labml.internal.configs.dynamic_hyperparam import DynamicHyperParam

from configs.ppo import LIVE_RANGES, LiveValues, PPOConfig, accepted_live_values


def _peek(param: DynamicHyperParam) -> tuple[Any, bool]:
    """(the value `param` holds now, whether labml has registered it), without tracking the value.

    labml 0.5 has no public getter: calling the param returns its value but also tracks it as
    `hp.<key>`, and warns while it is not registered with `experiment.configs`. This is the one
    place that reads its private state (`_value`, `_key`); recheck it when upgrading labml.
    """
    return param._value, param._key is not None


class _CheckedParam(DynamicHyperParam):
    """The live hyperparameter `name`, taking only what configs/ppo.py allows for it. `set_value`
    runs on labml's sender thread, and says there what became of the value."""

    def __init__(self, name: str, default: float, range_: tuple[float, float], say: Callable[[str], None]) -> None:
        integral = isinstance(default, int)
        super().__init__(default, "int" if integral else "float", (int(range_[0]), int(range_[1])) if integral else range_)
        self.name, self.say = name, say

    def set_value(self, value: object) -> None:
        accepted, refused = accepted_live_values({self.name: value}, fallback={})
        before, registered = _peek(self)
        if self.name not in accepted:
            self.say(f"refused live value {self.name} = {value!r}: expected {refused[self.name]}; keeping {before!r}")
            return
        super().set_value(accepted[self.name])  # an int for an integral one, as labml's own
        if registered:  # a resumed run's own values are set before labml knows the param: nothing to announce
            self.say(f"live value {self.name}: {before!r} → {accepted[self.name]!r}, from the next update")


class LiveHyperParams:
    """The run's live hyperparameters, a resumed run's `overrides` applied; what arrives is reported to `say`."""

    def __init__(self, config: PPOConfig, overrides: dict[str, float] | None, say: Callable[[str], None]) -> None:
        self.params = {name: _CheckedParam(name, getattr(config, name), range_, say) for name, range_ in LIVE_RANGES.items()}
        with warnings.catch_warnings():
            # set_value warns that the param is not registered yet: `experiment.configs` does that later.
            warnings.filterwarnings("ignore", message="Register dynamic schedules", category=UserWarning)
            for name, value in (overrides or {}).items():
                self.params[name].set_value(value)

    def values(self) -> LiveValues:
        """Current values; calling a registered param also tracks it as `hp.<name>` (the dashboard
        shows the value in use from that series)."""
        return {name: param() if _peek(param)[1] else _peek(param)[0] for name, param in self.params.items()}

    def bases(self) -> LiveValues:
        """Current values without tracking them: what a checkpoint keeps for a resume."""
        return {name: _peek(param)[0] for name, param in self.params.items()}

    def labml_configs(self, config: PPOConfig) -> dict[str, Any]:
        """The whole config for `experiment.configs`, the live keys as DynamicHyperParams."""
        values: dict[str, Any] = config.to_dict()
        values.update(self.params)
        return values
