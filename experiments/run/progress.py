"""The run's progress on the terminal, and every message printed while it is shown.

    update 12/976 (1.2%) · elapsed 0:00:25 · ETA 0:30:40 · score 1.8 · 12,288 agent steps · 530 steps/s

On a terminal this is one line redrawn in place by tqdm: tqdm cuts it to the terminal's width as
that changes (a line that wraps cannot be redrawn in place: that is how labml's line left
fragments behind), and `tqdm.write` clears it, prints a message on a line of its own and draws it
again, under one lock, from any thread (labml reports live hyperparameter changes from its
dashboard thread). Anywhere else (a pipe, a log file, CI) carriage returns would only garble the
log, so the same text is printed as a plain line every `every` updates, at least every
`every_s` seconds (a log of a slow machine is never quiet for long), and at the first and last.

The ETA and steps/s are measured from the end of the first update a run (or a resume) shows:
that update's time holds the start-up, so it shows `ETA -:--:--`, and the next ones a rate that
no start-up inflates.

Every message of the run goes through its `Console`, which writes it above the line while the
line is shown (labml's own messages too: experiments/run/labml/console.py).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from tqdm import tqdm

from experiments.run.console import Console, say


def hms(seconds: float | None) -> str:
    """`0:00:25`, `1:02:03`, `26:00:00`: always hours:minutes:seconds, so it cannot be misread."""
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def progress_text(update: int, total: int, env_steps: int, score: float | None, sps: float | None,
                  elapsed_s: float, eta_s: float | None) -> str:
    """The progress line. What matters most comes first, as a narrow terminal cuts the end."""
    score_text = "-" if score is None else f"{score:.1f}"
    sps_text = "-" if sps is None else f"{sps:,.0f}"
    return (f"update {update:,}/{total:,} ({100 * update / total:.1f}%) · elapsed {hms(elapsed_s)} · ETA {hms(eta_s)} · "
            f"score {score_text} · {env_steps:,} agent steps · {sps_text} steps/s")


def rate(since: tuple[float, int, int], now: float, update: int, env_steps: int,
         total: int) -> tuple[float | None, float | None]:
    """(agent steps/s, ETA in seconds) from the updates done since `since` = (when, update, agent
    steps) at the end of the first update shown. That first update is left out: its time holds the
    start-up (labml's start, the first rollout's memory, the first kernels), which no later
    update repeats; counted in, it made the first ETAs several times too long."""
    when, first_update, first_steps = since
    span, done = now - when, update - first_update
    if update >= total:
        return (env_steps - first_steps) / span if span > 0 and done > 0 else None, 0.0
    if done <= 0 or span <= 0:
        return None, None
    return (env_steps - first_steps) / span, (total - update) * span / done


class _Line(tqdm):
    """tqdm drawing our text as the whole line (`bar_format="{text}"`): tqdm's documented way to
    add fields is overriding `format_dict`."""

    text = ""

    @property
    def format_dict(self) -> dict[str, Any]:
        values = dict(super().format_dict)
        # A terminal that reports 0 columns (some `docker exec -t` and CI terminals): tqdm's width
        # is then 0 or -1, and it would cut the line to nothing or drop its last character.
        ncols = values.get("ncols")
        values["ncols"] = ncols if isinstance(ncols, int) and ncols > 0 else None
        values["text"] = self.text
        return values


# One lock for every writer of the line; a threading lock, as tqdm's default also creates a
# multiprocessing one, a semaphore the run has no use for.
_Line.set_lock(threading.RLock())


class ProgressLine:
    """Shows update `first_update + 1` … `total`. `started` is when the run started (perf_counter)."""

    def __init__(self, first_update: int, first_steps: int, total: int, started: float, console: Console,
                 every: int = 10, every_s: float = 60.0, interactive: bool | None = None) -> None:
        self.console, self.stream = console, console.stream
        self.first_update, self.first_steps, self.total, self.started, self.every = first_update, first_steps, total, started, every
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.every_s = every_s
        self.loop_started = self.printed = time.perf_counter()
        self.since: tuple[float, int, int] | None = None  # (when, update, agent steps) at the first update's end
        self._line: _Line | None = None
        if self.interactive:
            self._line = _Line(total=total, initial=first_update, file=self.stream, bar_format="{text}",
                               dynamic_ncols=True, leave=True, mininterval=0)

    def __enter__(self) -> ProgressLine:
        self.console.above = self.write
        return self

    def __exit__(self, *exc: object) -> None:
        self.console.above = None
        if self._line is not None:
            self._line.close()  # leaves the last state on the screen, then a newline

    def show(self, update: int, env_steps: int, score: float | None) -> None:
        now = time.perf_counter()
        done = update - self.first_update
        if self.since is None:  # the first update shown: its time holds the start-up, so no rate yet
            self.since = (now, update, env_steps)
            looping = now - self.loop_started
            sps = (env_steps - self.first_steps) / looping if done > 0 and looping > 0 else None
            eta = 0.0 if update >= self.total else None
        else:
            sps, eta = rate(self.since, now, update, env_steps, self.total)
        text = progress_text(update, self.total, env_steps, score, sps, now - self.started, eta)
        if self._line is not None:
            self._line.text = text
            self._line.n = update
            self._line.refresh()
        elif done == 1 or update % self.every == 0 or update == self.total or now - self.printed >= self.every_s:
            self.printed = now
            say(text, self.stream)

    def write(self, message: str) -> None:
        """`message` on a line of its own, above the progress line."""
        if self._line is None:
            say(message, self.stream)
            return
        try:
            _Line.write(message, file=self.stream)
            self.stream.flush()
        except OSError:  # a closed terminal or a pipe nobody reads: never stops the run
            pass
