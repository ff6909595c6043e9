"""How much each run has stored, so one run cannot fill the disk: a per-run cap on `/track` data.

labml-app keeps some of what a run sends and merges the rest, so the bytes a run is charged
for follow what it keeps:
- text and settings (stdout, stderr, logger, configs, name, tags, indicators...) are kept
  whole: each packet is charged the JSON size of everything but its `track`, `time` and
  `status` (the last two overwrite the previous values);
- a metric series is kept at most 1024 points long, however many points are sent: a series
  is charged SERIES_BYTES once, when the run first sends it (labml-app drops the series of
  labml's own indicators, ``hp.*``, ``grad.*``... : those cost nothing).
Series and configs do not grow with a run's length, only its console output does.

The store as a whole is capped too: at most `max_runs` runs (a new run_uuid is refused past it)
and `max_store_bytes` charged over all runs, so many runs cannot do what one run may not.
A deleted run's share is given back (`forget`).

The counts persist in one JSON file, so a restart does not reset them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dashboard.store import atomic_write, read_json_object
from dashboard.web import BadRequest

MAX_RUN_BYTES = 64 * 1024 * 1024
MAX_RUNS = 1000
MAX_STORE_BYTES = 2 * 1024 ** 3
# labml-app's Series keeps at most 1024 (step, last_step, value) points: 12.8 KB pickled at
# 521 points, so twice that rounded up.
SERIES_BYTES = 32 * 1024
NOT_CHARGED = frozenset({"track", "time", "status"})
# labml_app.enums.INDICATORS: series named "<one of these>.<...>" are not stored.
DROPPED_SERIES = frozenset({"grad", "param", "module", "metric", "hp"})


def packet_charge(packet: dict[str, Any], known_series: set[str]) -> tuple[int, list[str]]:
    """(bytes to charge, series sent for the first time) for one checked packet."""
    kept = {key: value for key, value in packet.items() if key not in NOT_CHARGED}
    charged = len(json.dumps(kept, ensure_ascii=False).encode("utf-8")) if kept else 0
    new_series = [name for name in packet.get("track") or {}
                  if name not in known_series and name.split(".")[0] not in DROPPED_SERIES]
    return charged + SERIES_BYTES * len(new_series), new_series


class RunUsage:
    """Bytes charged and series seen per run; `check` refuses what would pass a cap."""

    def __init__(self, path: Path, max_run_bytes: int = MAX_RUN_BYTES, max_runs: int = MAX_RUNS,
                 max_store_bytes: int = MAX_STORE_BYTES) -> None:
        self._path = path
        self.max_run_bytes = max_run_bytes
        self.max_runs = max_runs
        self.max_store_bytes = max_store_bytes
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, Any]] = self._load()
        self._total = sum(int(entry.get("bytes", 0)) for entry in self._runs.values())
        self._held: dict[str, int] = {}  # checked, not yet recorded (see `check`)

    def _load(self) -> dict[str, dict[str, Any]]:
        return read_json_object(self._path, "a usage file")

    def charge(self, run_uuid: str, packets: Iterable[dict[str, Any]]) -> tuple[int, list[str]]:
        """What storing `packets` would add to the run: (bytes, new series), without recording it."""
        with self._lock:
            known = set(self._runs.get(run_uuid, {}).get("series", []))
        total, new_series = 0, []
        for packet in packets:
            charged, new = packet_charge(packet, known)
            known.update(new)
            total += charged
            new_series += new
        return total, new_series

    def check(self, run_uuid: str, charged: int) -> None:
        """Refuse (413) what would pass a cap; otherwise hold `charged` for the run until `record`.

        Requests are checked one at a time while labml-app's updates may wait their turn
        (`labml_app_patches.serialize_updates`), so what is checked is held at once: two
        requests cannot both pass a cap that only one fits under.  A request whose update then
        fails keeps its share held until a restart (it errs on the side of the caps).
        """
        with self._lock:
            new = run_uuid not in self._runs and run_uuid not in self._held
            runs = len(self._runs.keys() | self._held.keys())
            used = int(self._runs.get(run_uuid, {}).get("bytes", 0)) + self._held.get(run_uuid, 0)
            total = self._total + sum(self._held.values())
            if new and runs >= self.max_runs:
                raise BadRequest(413, f"the store holds {runs} runs, the most --max-runs allows; delete runs "
                                      f"or restart the dashboard with a larger --max-runs")
            if used + charged > self.max_run_bytes:
                raise BadRequest(413, f"run {run_uuid} has stored {used} bytes and this request adds {charged}; "
                                      f"a run may store at most {self.max_run_bytes} bytes")
            if total + charged > self.max_store_bytes:
                raise BadRequest(413, f"the store holds {total} bytes and this request adds {charged}; it may hold "
                                      f"at most {self.max_store_bytes} bytes (--max-store-mb); delete runs or "
                                      f"restart the dashboard with a larger --max-store-mb")
            self._held[run_uuid] = self._held.get(run_uuid, 0) + charged

    def record(self, run_uuid: str, charged: int, new_series: list[str]) -> None:
        """The run has stored what `check` held for it."""
        with self._lock:
            held = self._held.pop(run_uuid, 0) - charged
            if held:
                self._held[run_uuid] = held  # other requests of the run still under way
            if not charged and run_uuid in self._runs:
                return  # most packets only extend known series: nothing to write
            entry = self._runs.setdefault(run_uuid, {"bytes": 0, "series": []})
            entry["bytes"] += charged
            entry["series"] += new_series
            self._total += charged
            self._save()

    def forget(self, run_uuid: str) -> None:
        """Give a deleted run's share back."""
        with self._lock:
            self._held.pop(run_uuid, None)
            entry = self._runs.pop(run_uuid, None)
            if entry is not None:
                self._total -= int(entry.get("bytes", 0))
                self._save()

    def _save(self) -> None:
        atomic_write(self._path, json.dumps(self._runs, sort_keys=True).encode("utf-8"))

    def used(self, run_uuid: str) -> int:
        with self._lock:
            return int(self._runs.get(run_uuid, {}).get("bytes", 0))
