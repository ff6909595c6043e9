"""The run's progress on the terminal, and every message printed while it is shown.

    update 12/976 (1.2%) · elapsed 0:00:25 · ETA 0:30:40 · score 1.8 · 12,288 agent steps · 530 steps/s

On a terminal this is one line redrawn in place by tqdm: tqdm cuts it to the terminal's width as
that changes (a line that wraps cannot be redrawn in place: that is how labml's line left
fragments behind), and `tqdm.write` clears it, prints a message on a line of its own and draws it
again, under one lock, from any thread (labml reports live hyperparameter changes from its
dashboard thread). Anywhere else (a pipe, a log file, CI) carriage returns would only garble the
log, so the same text is printed as a plain line every `every` updates, at least every
`every_s` seconds (a log of a slow machine is never quiet for long), and at the first and last.

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


class _Line(tqdm):
    """tqdm drawing our text as the whole line (`bar_format="{text}"`): tqdm's documented way to
    add fields is overriding `format_dict`."""

    text = ""

    @property
    def format_dict(self) -> dict[str, Any]:
        values = dict(super().format_dict)
        values["ncols"] = values.get("ncols") or None  # a terminal that reports 0 columns: do not cut
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
        elapsed, looping = now - self.started, now - self.loop_started  # the run's time; the updates' time
        done = update - self.first_update
        sps = (env_steps - self.first_steps) / looping if done > 0 and looping > 0 else None
        eta = (self.total - update) * looping / done if done > 0 else None
        text = progress_text(update, self.total, env_steps, score, sps, elapsed, eta)
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
