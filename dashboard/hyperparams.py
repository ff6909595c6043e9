"""Live ("dynamic") hyperparameters: what a run declares, validating changes, pending changes.

A labml run registers `FloatDynamicHyperParam` / `IntDynamicHyperParam` values in its
configs; their `to_yaml()` reaches the app as the config's `computed` value
``{'type': 'DynamicSchedule', 'default', 'range', 'dynamic_type'}``.  labml's client
still applies whatever comes back in a `/track` response's ``dynamic`` field, so the
dashboard stores requested changes and hands them to the run with its next `/track`.
The ranges are fixed by the first configs a run sends (`check_declarations`).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dashboard.store import atomic_write, read_json_object
from dashboard.strict_json import child_path

Number = int | float


class HyperParamError(ValueError):
    """A requested change is not acceptable; the message says why."""


@dataclass(frozen=True)
class DynamicParamSpec:
    key: str
    dynamic_type: str  # 'float' or 'int', as labml names them
    default: Number
    low: Number
    high: Number

    def to_json(self) -> dict[str, Any]:
        return {"type": self.dynamic_type, "default": self.default, "range": [self.low, self.high]}

    def coerce(self, value: Any) -> Number:
        """The value the run should receive, or `HyperParamError` with a readable reason."""
        # bool is an int subclass; True as a learning rate is always a mistake.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise HyperParamError(f"{self.key}: expected {self._type_name()}, got {json.dumps(value)}")
        if self.dynamic_type == "int":
            if not isinstance(value, int):
                raise HyperParamError(f"{self.key}: expected an integer, got {value!r}")
        else:
            if not math.isfinite(value):
                raise HyperParamError(f"{self.key}: expected a finite number, got {value!r}")
            value = float(value)
        if not self.low <= value <= self.high:
            raise HyperParamError(f"{self.key}: {value!r} is outside the allowed range "
                                  f"[{self.low}, {self.high}]")
        return value

    def _type_name(self) -> str:
        return "an integer" if self.dynamic_type == "int" else "a number"


def _spec_from_computed(key: str, computed: Any) -> DynamicParamSpec | None:
    if not isinstance(computed, dict) or computed.get("type") != "DynamicSchedule":
        return None
    dynamic_type = computed.get("dynamic_type")
    rng = computed.get("range")
    default = computed.get("default")
    if dynamic_type not in ("float", "int") or not isinstance(rng, (list, tuple)) or len(rng) != 2:
        return None
    if not isinstance(default, (int, float)) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (*rng, default)):
        return None
    return DynamicParamSpec(key=key, dynamic_type=dynamic_type, default=default, low=rng[0], high=rng[1])


def dynamic_specs(run_configs: Mapping[str, Any]) -> dict[str, DynamicParamSpec]:
    """The dynamic hyperparameters declared in a labml-app `Run.configs` mapping."""
    specs: dict[str, DynamicParamSpec] = {}
    for key, config in run_configs.items():
        if not isinstance(config, dict):
            continue
        # Nested configs are named 'parent.child'; `name` is the key labml's client resolves.
        name = config.get("name", key)
        spec = _spec_from_computed(name, config.get("computed"))
        if spec is not None:
            specs[name] = spec
    return specs


def _spec_of(key: str, config: Any) -> DynamicParamSpec | None:
    if not isinstance(config, dict):
        return None
    return _spec_from_computed(config.get("name", key), config.get("computed"))


def _describe(spec: DynamicParamSpec | None) -> str:
    if spec is None:
        return "no live hyperparameter"
    return f"{spec.key}: {spec.dynamic_type} in [{spec.low}, {spec.high}], default {spec.default}"


def _check_well_formed(key: str, config: Any) -> None:
    computed = config.get("computed") if isinstance(config, dict) else None
    if not isinstance(computed, dict) or computed.get("type") != "DynamicSchedule":
        return
    spec = _spec_of(key, config)
    if spec is None or not spec.low <= spec.default <= spec.high:
        raise HyperParamError(f"field {child_path('configs', key)}.computed: expected a DynamicSchedule with "
                              f"dynamic_type float or int, a range [low, high] and a default inside it")


def check_declarations(run_configs: Mapping[str, Any], packets: list[dict[str, Any]]) -> None:
    """Refuse packets that would change a run's live hyperparameters once it has declared them.

    The ranges a run declares with its first configs bound every change the dashboard accepts
    for it, so a later packet (from anything that can reach /track) may not widen, add or remove
    one.  labml's client re-sends configs unchanged, which passes.
    """
    merged = dict(run_configs)
    for packet in packets:
        configs = packet.get("configs") or {}
        for key, config in configs.items():
            _check_well_formed(key, config)
            old, new = _spec_of(key, merged.get(key)), _spec_of(key, config)
            if merged and old != new:
                raise HyperParamError(f"field {child_path('configs', key)}: the run declared {_describe(old)} "
                                      f"with its first configs; a later packet cannot change it (got {_describe(new)})")
        merged.update(configs)


def validate_changes(specs: Mapping[str, DynamicParamSpec], changes: Any) -> dict[str, Number]:
    """Check a whole request; either every change is valid or nothing is accepted."""
    if not isinstance(changes, dict) or not changes:
        raise HyperParamError('expected a non-empty JSON object {"name": value, ...}')
    accepted: dict[str, Number] = {}
    for key, value in changes.items():
        if key not in specs:
            known = ", ".join(sorted(specs)) or "none"
            raise HyperParamError(f"{key}: not a dynamic hyperparameter of this run (dynamic: {known})")
        accepted[key] = specs[key].coerce(value)
    return accepted


def reported_values(packets: Any) -> dict[str, Number]:
    """The latest `hp.<key>` values a run tracked, from the packets of one `/track` request.

    labml tracks a dynamic hyperparameter as `hp.<key>` whenever the run reads it;
    labml-app drops `hp.*` series from its charts, so the dashboard keeps the last value.
    (labml may average values within one send, so this is the mean over its last window.)
    """
    found: dict[str, Number] = {}
    for packet in packets if isinstance(packets, list) else [packets]:
        track = packet.get("track") if isinstance(packet, dict) else None
        if not isinstance(track, dict):
            continue
        for name, series in track.items():
            if not (isinstance(name, str) and name.startswith("hp.") and isinstance(series, dict)):
                continue
            values = series.get("value")
            if isinstance(values, list) and values and isinstance(values[-1], (int, float)) \
                    and not isinstance(values[-1], bool):
                found[name[len("hp."):]] = values[-1]
    return found


class HyperParamStore:
    """Pending, delivered and reported values per run, persisted as one JSON file.

    Pending changes survive a dashboard restart; they are handed out once, with the
    run's next `/track` response, and then become the run's "delivered" values.
    "Reported" values are what the run last tracked as `hp.<key>`, forgotten when a change of that
    key is delivered (until the run reports again, the delivered value is the newer one).
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, dict[str, Number]]] = self._load()

    def _load(self) -> dict[str, dict[str, dict[str, Number]]]:
        return read_json_object(self._path, "a hyperparameter store")

    def _save(self) -> None:
        atomic_write(self._path, json.dumps(self._runs, indent=1, sort_keys=True).encode("utf-8"))

    def _run(self, run_uuid: str) -> dict[str, dict[str, Number]]:
        entry = self._runs.setdefault(run_uuid, {})
        for part in ("pending", "delivered", "reported"):
            entry.setdefault(part, {})
        return entry

    def add_pending(self, run_uuid: str, values: Mapping[str, Number]) -> dict[str, Number]:
        with self._lock:
            self._run(run_uuid)["pending"].update(values)
            self._save()
            return dict(self._runs[run_uuid]["pending"])

    def take_pending(self, run_uuid: str) -> dict[str, Number]:
        with self._lock:
            entry = self._run(run_uuid)
            if not entry["pending"]:
                return {}
            pending = entry["pending"]
            entry["delivered"].update(pending)
            entry["pending"] = {}
            # What the run reported of these was before the change: its next report replaces it.
            for key in pending:
                entry["reported"].pop(key, None)
            self._save()
            return pending

    def set_reported(self, run_uuid: str, values: Mapping[str, Number]) -> None:
        with self._lock:
            reported = self._run(run_uuid)["reported"]
            if any(reported.get(k) != v for k, v in values.items()):
                reported.update(values)
                self._save()

    def get(self, run_uuid: str) -> dict[str, dict[str, Number]]:
        with self._lock:
            entry = self._runs.get(run_uuid, {})
            return {part: dict(entry.get(part, {})) for part in ("pending", "delivered", "reported")}
