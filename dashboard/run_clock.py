"""When the dashboard received each run's points: the wall clock behind the comparison page's
"wall-clock time" axis (relative time since each run started, as W&B's "Relative Time (Wall)").

labml-app keeps a series' steps and values, not when they were recorded. So, for each of a run's
`/track` requests that brings points, the dashboard notes the smallest and the largest step it
brought, both at its own clock on arrival: a point is dated by the request that brought it. labml's
client sends as it tracks (about every second for this trainer), so a point is dated within about
a second of when it was recorded; points it held back while the dashboard was unreachable are
dated when they arrive. Between two notes the clock is read along a straight line, as a run's
steps go; a pause between two requests (a run resumed hours later) stays a pause.

The axis starts at labml-app's `start_time` of the run: the time labml's client put in the run's
uuid, on the run's machine (dashboard/handlers.py, `uuid1_time`), else the run's first request.
A run on a machine whose clock is off shifts by as much; a point is never dated before its start.

A run's history posted when it resumes (experiments/run/labml/history.py: a packet labml's client
did not make, with no `time`) was not recorded then: its steps are noted as "no clock" and get none.

Each run keeps at most `MAX_NOTES` notes in a file of its own: past that every second timed note
goes (the last, and every "no clock" mark, stay), so a long run's clock gets coarser, never its
file larger (about 30 bytes a note).
"""

from __future__ import annotations

import bisect
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from configs.files import atomic_write
from dashboard.checks import RUN_UUID_RE

MAX_NOTES = 1024
CACHED_RUNS = 64  # runs whose notes are kept in memory (the files hold them all)

Note = tuple[float, float | None]  # (a step a request brought, the dashboard's clock then, or None: no clock)


def notes_of(packets: Iterable[dict[str, Any]], now: float) -> list[Note]:
    """The notes one `/track` request's checked packets make: the smallest and the largest step of
    each packet with points, at `now` (None for a packet with no `time` of its client's: a posted
    history, whose largest step alone is noted)."""
    notes: list[Note] = []
    for packet in packets:
        steps = [float(step) for series in (packet.get("track") or {}).values() for step in series["step"]]
        steps = [step for step in steps if math.isfinite(step)]
        if not steps:
            continue
        timed = "time" in packet
        notes += [(min(steps), now)] if timed and min(steps) < max(steps) else []
        notes.append((max(steps), now if timed else None))
    return notes


def thinned(notes: list[Note]) -> list[Note]:
    """At most MAX_NOTES notes where it can: every second timed note dropped while there are more,
    the last and every "no clock" mark kept."""
    while len(notes) > MAX_NOTES:
        kept = [note for i, note in enumerate(notes[:-1]) if i % 2 == 0 or note[1] is None] + notes[-1:]
        if len(kept) == len(notes):
            break
        notes = kept
    return notes


def seconds_at(notes: list[Note], start_time: float, steps: list[float]) -> list[float | None]:
    """Each step's wall-clock seconds since `start_time`, read along a straight line between the
    notes around it; None where it has no clock (before the first note, a posted history's steps,
    past the last note). Never below 0."""
    known: list[Note] = []
    for step, at in notes:
        if not known or step > known[-1][0]:  # a series never goes back (handlers.drop_known_points)
            known.append((step, at))
    marks = [step for step, _ in known]
    out: list[float | None] = []
    for step in steps:
        i = bisect.bisect_left(marks, step)
        if not math.isfinite(step) or i == len(known) or (at := known[i][1]) is None or (i == 0 and marks[0] != step):
            out.append(None)
            continue
        (s0, t0), s1 = known[i - 1] if i > 0 else known[0], marks[i]
        # On a note, or after a history (no clock before it): the request's own arrival.
        since = at if s1 == step or t0 is None else t0 + (at - t0) * (step - s0) / (s1 - s0)
        out.append(round(max(0.0, since - start_time), 3))
    return out


def read_notes(path: Path) -> list[Note]:
    """A run's notes as its file holds them ([] before its first); `ValueError` naming the file
    when it holds anything else (the store is the dashboard's own, but a file is checked as read)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return []
    if not isinstance(data, list) or len(data) > 2 * MAX_NOTES or not all(
            isinstance(note, list) and len(note) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                               for v in (note[0], *([] if note[1] is None else [note[1]])))
            for note in data):
        raise ValueError(f"{path}: not a run clock file (a list of [step, time or null] pairs)")
    return [(float(step), None if at is None else float(at)) for step, at in data]


class RunClock:
    """Each run's notes, one small file a run in `folder`, replaced whole as a request of the run
    brings points: a store of many runs costs each request its own run's file only. `note` what a
    request brought (in a worker thread), `seconds` for the comparison (quick: it never waits for a
    file to be written), `forget` a deleted run."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()  # the notes in memory, and those not written yet
        self._write_lock = threading.Lock()  # one file written at a time
        self._notes: OrderedDict[str, list[Note]] = OrderedDict()  # the runs used last
        self._unwritten: dict[str, bytes] = {}  # each run's newest notes, encoded, until a write takes them

    def _path(self, run_uuid: str) -> Path:
        if not RUN_UUID_RE.match(run_uuid):  # checked where requests come in; a file name must not be anything else
            raise ValueError(f"not a run uuid: {run_uuid[:80]!r}")
        return self.folder / f"{run_uuid}.json"

    def _of(self, run_uuid: str) -> list[Note]:
        """The run's notes (called under the lock): from memory, else its file."""
        if run_uuid not in self._notes:
            self._notes[run_uuid] = read_notes(self._path(run_uuid))
            while len(self._notes) > CACHED_RUNS:
                self._notes.popitem(last=False)
        self._notes.move_to_end(run_uuid)
        return self._notes[run_uuid]

    def note(self, run_uuid: str, packets: list[dict[str, Any]], now: float) -> None:
        """Note the points of one request of the run itself."""
        new = notes_of(packets, now)
        if not new:
            return
        with self._lock:
            notes = self._notes[run_uuid] = thinned([*self._of(run_uuid), *new])
            self._unwritten[run_uuid] = json.dumps(notes, separators=(",", ":")).encode()
        with self._write_lock:
            with self._lock:
                body = self._unwritten.pop(run_uuid, None)
            if body is not None:  # else a later request's write took this one's notes too, or the run was forgotten
                atomic_write(self._path(run_uuid), body)

    def seconds(self, run_uuid: str, start_time: float | None, steps: list[float]) -> list[float | None]:
        """The wall-clock seconds since the run started at each of `steps` (see `seconds_at`)."""
        with self._lock:
            notes = list(self._of(run_uuid))
        if start_time is None:
            return [None] * len(steps)
        return seconds_at(notes, start_time, steps)

    def forget(self, run_uuid: str, *, write_soon: bool = False) -> None:
        """A deleted run's notes go; `write_soon`: its file is removed in a thread of its own (for a
        caller on the event loop)."""
        if write_soon:
            threading.Thread(target=self.forget, args=(run_uuid,), name=f"forget the clock of {run_uuid}").start()
            return
        with self._write_lock, self._lock:
            self._notes.pop(run_uuid, None)
            self._unwritten.pop(run_uuid, None)
            self._path(run_uuid).unlink(missing_ok=True)
