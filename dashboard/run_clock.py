"""When the dashboard received each run's points: the wall clock behind the comparison page's
"wall-clock time" axis (relative time since each run started, as W&B's "Relative Time (Wall)").

labml-app keeps a series' steps and values, not when they were recorded. So, for each of a run's
`/track` requests that brings points, the dashboard notes the largest step it brought and its own
clock at arrival: a point was recorded at most one send (about a second for this trainer, labml's
client sends as it tracks) before that. Between two notes the clock is read along a straight line,
as a run's steps go. The dashboard's own clock only: labml-app's `start_time` is also the
dashboard's (the run's first request), and nothing a client says about time is trusted.

A run's history posted when it resumes (experiments/run/labml/history.py: a packet labml's client
did not make, with no `time`) was not recorded then: its steps are noted as "no clock" and get none.

Each run keeps at most `MAX_NOTES` notes: past that every second one goes (the first and the last
stay), so a long run's clock gets coarser, never its file larger (about 30 bytes a note).
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from configs.files import atomic_write

MAX_NOTES = 1024

Note = tuple[float, float | None]  # (the largest step of a request, the dashboard's clock then, or None: no clock)


def notes_of(packets: Iterable[dict[str, Any]], now: float) -> list[Note]:
    """The notes one `/track` request's checked packets make: one per packet with points, its
    largest step at `now` (None for a packet with no `time` of its client's, a posted history)."""
    notes: list[Note] = []
    for packet in packets:
        steps = [step for series in (packet.get("track") or {}).values() for step in series["step"]]
        if steps:
            notes.append((float(max(steps)), now if "time" in packet else None))
    return notes


def thinned(notes: list[Note]) -> list[Note]:
    """At most MAX_NOTES notes: every second one dropped while there are more (the last kept)."""
    while len(notes) > MAX_NOTES:
        notes = [*notes[:-1:2], notes[-1]]
    return notes


def seconds_at(notes: list[Note], start_time: float, steps: list[float]) -> list[float | None]:
    """Each step's wall-clock seconds since `start_time` (step 0 then), read along a straight line
    between the notes around it; None where it has no clock (a posted history's steps, or past the
    last note)."""
    known: list[tuple[float, float | None]] = [(0.0, start_time)]
    for step, at in notes:
        if step > known[-1][0]:  # a series never goes back (handlers.drop_known_points)
            known.append((step, at))
    marks = [step for step, _ in known]
    out: list[float | None] = []
    for step in steps:
        i = bisect.bisect_left(marks, step)
        if step < 0 or i == len(known) or (at := known[i][1]) is None:
            out.append(None)
            continue
        (s0, t0), s1 = known[i - 1] if i > 0 else known[0], known[i][0]
        # On a note, or after a history (no clock before it): the request's own arrival.
        since = at if s1 == step or t0 is None else t0 + (at - t0) * (step - s0) / (s1 - s0)
        out.append(round(since - start_time, 3))
    return out


def read_notes(path: Path) -> list[Note]:
    """A run's notes as its file holds them ([] before its first); `ValueError` naming the file
    when it holds anything else (the store is the dashboard's own, but a file is checked as read)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return []
    if not isinstance(data, list) or len(data) > MAX_NOTES or not all(
            isinstance(note, list) and len(note) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                               for v in (note[0], *([] if note[1] is None else [note[1]])))
            for note in data):
        raise ValueError(f"{path}: not a run clock file (a list of at most {MAX_NOTES} [step, time or null] pairs)")
    return [(float(step), None if at is None else float(at)) for step, at in data]


class RunClock:
    """Each run's notes, one small file a run in `folder` (at most MAX_NOTES notes, about 30 kB),
    replaced whole as a request of the run brings points: a store of many runs costs each request
    its own run's file only. `note` what a request brought, `seconds` for the comparison, `forget`
    a deleted run. Run uuids are checked before they get here (`checks.track_query`, compare's query)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()  # one change at a time, written in order
        self._notes: dict[str, list[Note]] = {}

    def _of(self, run_uuid: str) -> list[Note]:
        if run_uuid not in self._notes:
            self._notes[run_uuid] = read_notes(self.folder / f"{run_uuid}.json")
        return self._notes[run_uuid]

    def note(self, run_uuid: str, packets: list[dict[str, Any]], now: float) -> None:
        """Note the points of one request of the run itself (called in a worker thread)."""
        new = notes_of(packets, now)
        if not new:
            return
        with self._lock:
            notes = self._notes[run_uuid] = thinned([*self._of(run_uuid), *new])
            atomic_write(self.folder / f"{run_uuid}.json", json.dumps(notes, separators=(",", ":")).encode())

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
        with self._lock:
            self._notes.pop(run_uuid, None)
            (self.folder / f"{run_uuid}.json").unlink(missing_ok=True)
