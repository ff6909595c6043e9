"""Ctrl-C and SIGTERM without losing work: the first asks the run to stop (what it then does is
the `plan` its message says); a second one stops at once. A driver of many runs (a sweep, a
population) stops at a KeyboardInterrupt instead: `signals_stop_as_ctrl_c`."""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType, TracebackType

from experiments.run.console import say

AFTER_UPDATE = "stopping after this update and saving a checkpoint"
BEFORE_TRAINING = "stopping before the first update, once the workers have started"
# The trainer checks for a stop between minibatches: the update in progress is undone whole.
WITHIN_UPDATE = "stopping within seconds: the update in progress is undone, and a checkpoint of the last whole one is kept"


class GracefulStop:
    def __init__(self, plan: str = AFTER_UPDATE, report: Callable[[str], None] = say) -> None:
        self.requested: str | None = None  # name of the first signal received
        self.plan = plan  # what the first signal does, as its message says
        self.report = report
        self._previous: dict[int, object] = {}

    def __enter__(self) -> GracefulStop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise KeyboardInterrupt(f"second stop request ({name}): stopping now")
        self.requested = name
        self.report(f"{name} received: {self.plan} (send it again to stop at once)")

    @property
    def exit_code(self) -> int:
        return 128 + int(signal.Signals[self.requested]) if self.requested else 0


def signals_stop_as_ctrl_c() -> None:
    """SIGINT and SIGTERM both raise KeyboardInterrupt in this process (a driver that stops its runs
    there). SIGINT's is set too: Python sets it only when SIGINT was not ignored at start, and a
    command a script starts in the background (`cmd &`, nohup) starts with SIGINT ignored, where a
    `kill -INT` did nothing: the driver waited on its runs for good. `ray.init` replaces SIGTERM's
    handler; the driver's connection puts it back (ray_setup/connection.py)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
