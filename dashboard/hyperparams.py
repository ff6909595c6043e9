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
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configs.fields import live_value_problem_in
from dashboard.store import RecordFile
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
        """The value the run should receive, or `HyperParamError` naming the value and what is
        accepted: the training side's own rule (configs/fields.py), with the range the run declared."""
        integral = self.dynamic_type == "int"
        if (problem := live_value_problem_in(value, self.low, self.high, integral)) is not None:
            raise HyperParamError(f"{self.key}: {json.dumps(value)[:80]}: expected {problem}")
        return int(value) if integral else float(value)


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
            raise HyperParamError(f"{key}: not a live hyperparameter of this run (live: {known})")
        accepted[key] = specs[key].coerce(value)
    return accepted


def reported_values(packets: Any, declared: Collection[str]) -> dict[str, Number]:
    """The latest `hp.<key>` values a run tracked, from the packets of one `/track` request, for
    the `declared` keys (the run's live hyperparameters) only.

    labml tracks a dynamic hyperparameter as `hp.<key>` whenever the run reads it;
    labml-app drops `hp.*` series from its charts, so the dashboard keeps the last value.
    (labml may average values within one send, so this is the mean over its last window.)
    Any client may send other `hp.*` names, as many as it likes: kept, each would stay in the
    store's file, which is rewritten whole on every change.
    """
    found: dict[str, Number] = {}
    for packet in packets if isinstance(packets, list) else [packets]:
        track = packet.get("track") if isinstance(packet, dict) else None
        if not isinstance(track, dict):
            continue
        for name, series in track.items():
            if not (isinstance(name, str) and name.startswith("hp.") and name[len("hp."):] in declared
                    and isinstance(series, dict)):
                continue
            values = series.get("value")
            if isinstance(values, list) and values and isinstance(values[-1], (int, float)) \
                    and not isinstance(values[-1], bool):
                found[name[len("hp."):]] = values[-1]
    return found


PARTS = ("pending", "sent", "delivered", "reported")


# labml-app's statuses of a run that may still send updates, and so take a change.
RUNNING = ("in progress", "no response")


def is_run_itself(run_uuid: str, stored_uuid: str, rank: int, main_rank: int) -> bool:
    """Whether a `/track` request speaks for the run that applies its live values: the main
    rank's record. Anything claiming another rank (filed by labml-app as "<uuid>_<rank>") or
    naming itself the main rank while not rank 0 neither receives nor consumes the run's changes."""
    return stored_uuid == run_uuid and rank == main_rank == 0


def ended(packets: list[dict[str, Any]]) -> bool:
    """Whether these packets report the run's end (labml sends its status only then)."""
    return any(isinstance(p.get("status"), dict) and p["status"].get("status") not in (None, *RUNNING)
               for p in packets)


# What labml's client sends once per leg, as `experiment.start()` begins it (labml's
# `AppExperiment.start`): a run resumed in a new process sends them again, its end status only at its end.
LEG_START_KEYS = ("pid", "start_step")


def leg_started(packets: list[dict[str, Any]]) -> bool:
    """Whether these packets begin a leg of the run: a process has started training it, so a run
    the dashboard last saw end (completed, interrupted, crashed) is running again."""
    return any(all(key in p for key in LEG_START_KEYS) for p in packets)


def change_refusal(run_uuid: str, status: str) -> str | None:
    """Why a run cannot take a live change now, or None when it can."""
    if status in RUNNING:
        return None
    return (f"run {run_uuid} is {status}: a live change reaches only a running run; resume it with "
            f"--dashboard and change it while it runs")


def as_declared(spec: DynamicParamSpec, value: Number | None) -> Number | None:
    """A reported value in its declared type: labml reports every value as a float (4.0 epochs)."""
    if value is not None and spec.dynamic_type == "int" and float(value).is_integer():
        return int(value)
    return value


def param_state(spec: DynamicParamSpec, state: Mapping[str, Mapping[str, Number]]) -> dict[str, Any]:
    """One live hyperparameter as the API answers it: `applied` is what the run last reported
    using (None before its first report), `current` that or else its declared starting value,
    `sent` a change handed to the run that it has not reported using yet, `pending` one queued."""
    key = spec.key
    applied = as_declared(spec, state["reported"].get(key))
    return {**spec.to_json(), "applied": applied, "current": spec.default if applied is None else applied,
            "reported": applied, "sent": state["sent"].get(key), "pending": state["pending"].get(key)}


def same_value(sent: Number, reported: Number) -> bool:
    """Whether a report shows the run using a sent value: labml reports a value through float
    arithmetic (a mean of the steps in one send), so equal to within rounding."""
    return math.isclose(sent, reported, rel_tol=1e-6, abs_tol=1e-12)


class HyperParamStore:
    """What the dashboard knows of each run's live values, persisted as one JSON file.

    - "pending": changes queued for the run; they survive a dashboard restart and are handed out
      once, with the run's next `/track` response (`take_pending`);
    - "sent": changes handed out that the run has not yet reported using; a change is applied
      only once the run tracks it as `hp.<key>` (`set_reported` moves it out of here);
    - "delivered": the last value handed out per key (what a population's tools read back);
    - "reported": what the run last tracked as `hp.<key>`: the values it trains with.

    Each change is written before its method returns; call the methods that change something off
    the event loop (the file is written and fsynced there, see `store.RecordFile`).
    """

    def __init__(self, path: Path) -> None:
        self._file = RecordFile(path, "a hyperparameter store")
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, dict[str, Number]]] = self._file.load()

    def _run(self, run_uuid: str) -> dict[str, dict[str, Number]]:
        entry = self._runs.setdefault(run_uuid, {})
        for part in PARTS:
            entry.setdefault(part, {})
        return entry

    def add_pending(self, run_uuid: str, values: Mapping[str, Number]) -> dict[str, Number]:
        with self._lock:
            self._run(run_uuid)["pending"].update(values)
            change = self._file.stage(run_uuid, self._runs[run_uuid])
            pending = dict(self._runs[run_uuid]["pending"])
        self._file.write(change)
        return pending

    def take_pending(self, run_uuid: str) -> dict[str, Number]:
        with self._lock:
            entry = self._run(run_uuid)
            if not entry["pending"]:
                return {}
            pending = entry["pending"]
            entry["delivered"].update(pending)
            entry["sent"].update(pending)
            entry["pending"] = {}
            change = self._file.stage(run_uuid, entry)
        self._file.write(change)
        return pending

    def drop_pending(self, run_uuid: str) -> dict[str, Number]:
        """Forget the changes queued for a run that has ended (they can no longer reach it)."""
        with self._lock:
            entry = self._runs.get(run_uuid)
            if not entry or not entry.get("pending"):
                return {}
            dropped, entry["pending"] = entry["pending"], {}
            change = self._file.stage(run_uuid, entry)
        self._file.write(change)
        return dropped

    def set_reported(self, run_uuid: str, values: Mapping[str, Number], declared: Collection[str] | None = None) -> None:
        """The values the run tracked; a sent change it now reports using is applied. A report of
        another value leaves it sent: labml may still be delivering what the run tracked before
        it received the change. Given the run's `declared` keys, a reported value of any other
        key is dropped (a store written before undeclared ones were left out may hold some)."""
        with self._lock:
            entry = self._run(run_uuid)
            reported, sent = entry["reported"], entry["sent"]
            confirmed = [k for k, v in values.items() if k in sent and same_value(sent[k], v)]
            undeclared = [] if declared is None else [k for k in reported if k not in declared]
            if not confirmed and not undeclared and all(reported.get(k) == v for k, v in values.items()):
                return
            for key in undeclared:
                del reported[key]
            reported.update(values)
            for key in confirmed:
                del sent[key]
            change = self._file.stage(run_uuid, entry)
        self._file.write(change)

    def forget(self, run_uuid: str, *, write_soon: bool = False) -> None:
        """Drop a deleted run's record; `write_soon` as for `usage.RunUsage.forget`."""
        with self._lock:
            if self._runs.pop(run_uuid, None) is None:
                return
            change = self._file.stage(run_uuid, None)
        self._file.write(change, soon=write_soon)

    def get(self, run_uuid: str) -> dict[str, dict[str, Number]]:
        with self._lock:
            entry = self._runs.get(run_uuid, {})
            return {part: dict(entry.get(part, {})) for part in PARTS}
