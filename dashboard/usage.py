"""How much each run has stored, so one run cannot fill the disk: a per-run cap on `/track` data.

Every byte a run's packets make the store keep is charged, whatever a field or series is called,
by what is kept (measured on labml-app's file store, then rounded up):
- a new run: RUN_BYTES, for the records labml-app makes for any run (its run, status, log pages,
  index entries: about 2.6 KB);
- text and settings (stdout, stderr, logger, configs, name, tags, indicators, status...) are kept
  whole: each packet is charged the JSON size of everything but its `track` and `time` (the time
  overwrites the last), some fields several times (`KEPT_COPIES`); console text also 1/16 more
  for the log pages labml-app cuts it into (about 90 bytes per 3000 characters);
- a metric series is kept at most 1024 points long, however many points are sent: a series is
  charged SERIES_BYTES plus NAME_COPIES times its name once, when the run first sends it.  That
  holds for every name: labml-app keeps no ``hp.*`` or ``grad.*`` series, but the dashboard keeps
  the last ``hp.<key>`` value in hyperparams.json and every name in usage.json.
Series and configs do not grow with a run's length, only its console output does.

The store as a whole is capped too: at most `max_runs` runs (a new run_uuid is refused past it)
and `max_store_bytes` charged over all runs, so many runs cannot do what one run may not.
A deleted run's share is given back (`forget`).

The counts persist in one JSON file, so a restart does not reset them; `record` and `forget`
write it, so call them off the event loop (see `store.RecordFile`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dashboard.store import RecordFile
from dashboard.web import BadRequest

MAX_RUN_BYTES = 64 * 1024 * 1024
MAX_RUNS = 1000
MAX_STORE_BYTES = 2 * 1024 ** 3
# labml-app's records of any run weigh about 2.6 KB; 8 KiB also covers a new computer record.
RUN_BYTES = 8 * 1024
# labml-app's Series keeps at most 1024 (step, last_step, value) points: 12.8 KB pickled at
# 521 points, so twice that rounded up.
SERIES_BYTES = 32 * 1024
# A series name is kept in labml-app's metrics record (its series and its list of names) and in
# usage.json; an hp.<key> in hyperparams.json and usage.json instead.
NAME_COPIES = 3
NOT_CHARGED = frozenset({"track", "time"})
# labml-app keeps `computer` in the run, in a computer record and as that record's index key;
# `configs` in the run and, for live values, in its hyperparameter analysis; the dashboard keeps up
# to four numbers per live value (pending, sent, delivered, reported) in hyperparams.json.
KEPT_COPIES = {"computer": 3, "configs": 4}
TEXT_STREAMS = frozenset({"stdout", "stderr", "logger"})
LOG_PAGE_SHARE = 16  # console text is charged 1/16 more: labml-app's log pages


def series_charge(name: str) -> int:
    return SERIES_BYTES + NAME_COPIES * len(name.encode("utf-8"))


def packet_charge(packet: dict[str, Any], known_series: set[str]) -> tuple[int, list[str]]:
    """(bytes to charge, series sent for the first time) for one checked packet."""
    charged = 0
    for key, value in packet.items():
        if key in NOT_CHARGED:
            continue
        size = len(json.dumps({key: value}, ensure_ascii=False).encode("utf-8"))
        charged += size * KEPT_COPIES.get(key, 1)
        if key in TEXT_STREAMS and isinstance(value, str):
            charged += -(-len(value) // LOG_PAGE_SHARE)
    new_series = [name for name in packet.get("track") or {} if name not in known_series]
    return charged + sum(series_charge(name) for name in new_series), new_series


class RunUsage:
    """Bytes charged and series seen per run; `check` refuses what would pass a cap."""

    def __init__(self, path: Path, max_run_bytes: int = MAX_RUN_BYTES, max_runs: int = MAX_RUNS,
                 max_store_bytes: int = MAX_STORE_BYTES) -> None:
        self._file = RecordFile(path, "a usage file")
        self.max_run_bytes = max_run_bytes
        self.max_runs = max_runs
        self.max_store_bytes = max_store_bytes
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, Any]] = self._file.load()
        self._total = sum(int(entry.get("bytes", 0)) for entry in self._runs.values())
        self._held: dict[str, int] = {}  # checked, not yet recorded (see `check`)

    def charge(self, run_uuid: str, packets: Iterable[dict[str, Any]]) -> tuple[int, list[str]]:
        """What storing `packets` would add to the run: (bytes, new series), without recording it."""
        with self._lock:
            known = set(self._runs.get(run_uuid, {}).get("series", []))
            new_run = run_uuid not in self._runs
        total, new_series = RUN_BYTES if new_run else 0, []
        for packet in packets:
            charged, new = packet_charge(packet, known)
            known.update(new)
            total += charged
            new_series += new
        return total, new_series

    def check(self, run_uuid: str, charged: int) -> None:
        """Refuse (413) what would pass a cap; otherwise hold `charged` for the run until `record`.

        Requests are checked one at a time while labml-app's updates may wait their turn
        (`labml_app_patches.serialize_store_writes`), so what is checked is held at once: two
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
            have = set(entry["series"])
            entry["series"] += [name for name in new_series if name not in have]
            self._total += charged
            change = self._file.stage(run_uuid, entry)
        self._file.write(change)

    def forget(self, run_uuid: str, *, write_soon: bool = False) -> None:
        """Give a deleted run's share back; `write_soon`: write the file in a thread of its own
        (for a caller on the event loop), the share being given back at once."""
        with self._lock:
            self._held.pop(run_uuid, None)
            entry = self._runs.pop(run_uuid, None)
            if entry is None:
                return
            self._total -= int(entry.get("bytes", 0))
            change = self._file.stage(run_uuid, None)
        self._file.write(change, soon=write_soon)

    def used(self, run_uuid: str) -> int:
        with self._lock:
            return int(self._runs.get(run_uuid, {}).get("bytes", 0))
