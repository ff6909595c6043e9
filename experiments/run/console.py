"""Messages for the person running a run, on stderr, that can never stop the run.

A run's stderr may be a pipe nobody reads any more: the sweep or curves driver that started it
was killed, or `... 2>&1 | head` has exited. Writing to it then raises BrokenPipeError, and from a
signal handler that exception surfaces wherever the trainer happens to be (in the middle of a
checkpoint, say). Such a message is dropped instead; the run goes on and saves its work.

A run owns one `Console`: while its progress line is shown (progress.py), a message goes above
it, on a line of its own, instead of being written into it.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from configs.terminal import escaped


def say(message: str, stream: TextIO | None = None) -> None:
    """`message` and a newline on `stream` (stderr), now; nothing if the stream is gone. It may
    quote a dashboard's answer or a file: control characters are escaped."""
    message = escaped(message, lines=True)
    stream = stream or sys.stderr
    try:
        print(message, file=stream, flush=True)
    except OSError:  # BrokenPipeError; EIO from a terminal that was closed
        pass


def shown(path: Path | str) -> str:
    """`path` as a person reads it and pastes it back from where they are: relative to the current
    folder when it lies under it (`runs/breakout/…`), else whole."""
    path = Path(path)
    try:
        here = Path.cwd()
    except OSError:  # the current folder was removed
        return str(path)
    for candidate, base in ((path.absolute(), here), (Path(os.path.realpath(path)), here.resolve())):
        if candidate.is_relative_to(base):
            return str(candidate.relative_to(base))
    return str(path)


class Console:
    """Where a run's messages go: `stream`, above the progress line while one is shown.

    A signal handler says things too (stopping.py), and Python runs it in the main thread between
    two steps of whatever it was doing, possibly in the middle of another message. Written there
    and then, it would re-enter the write in progress: labml's console capture holds a lock while
    it copies each write, so the run would wait on itself forever (a TERM while the run printed its
    first lines did). A message that arrives during another is written right after it instead."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.above: Callable[[str], None] | None = None  # set by the progress line while it is shown
        self._queued: deque[str] = deque()
        self._writing = False

    def say(self, message: str) -> None:
        self._queued.append(message)
        if self._writing:  # a handler interrupted a message: the outer call writes this one next
            return
        # Race-free between bytecodes: a message queued after the inner loop's last look is seen by
        # the outer one, and one that comes after `_writing` is cleared writes itself.
        while self._queued:
            self._writing = True
            try:
                while self._queued:
                    self._write(self._queued.popleft())
            finally:
                self._writing = False

    def _write(self, message: str) -> None:
        if self.above is not None:
            self.above(escaped(message, lines=True))
        else:
            say(message, self.stream)
