"""Messages for the person running a run, on stderr, that can never stop the run.

A run's stderr may be a pipe nobody reads any more: the sweep or curves driver that started it
was killed, or `... 2>&1 | head` has exited. Writing to it then raises BrokenPipeError, and from a
signal handler that exception surfaces wherever the trainer happens to be (in the middle of a
checkpoint, say). Such a message is dropped instead; the run goes on and saves its work.

While the progress line is shown (`experiments.run.progress`), a message goes above it, on a
line of its own, instead of being written into it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from configs.terminal import escaped

write_above: Callable[[str], None] | None = None  # set while a progress line is shown


def say(message: str, stream: TextIO | None = None) -> None:
    message = escaped(message, lines=True)  # it may quote a dashboard's answer (labml's notes of a live change), a file
    if write_above is not None and stream in (None, sys.stderr):
        write_above(message)
    else:
        print_line(message, stream or sys.stderr)


def print_line(message: str, stream: TextIO) -> None:
    """`message` and a newline on `stream`, now; nothing if the stream is gone."""
    try:
        print(message, file=stream, flush=True)
    except OSError:  # BrokenPipeError; EIO from a terminal that was closed
        pass
