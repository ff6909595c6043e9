"""Messages for the person running a run, on stderr, that can never stop the run.

A run's stderr may be a pipe nobody reads any more: the sweep or curves driver that started it
was killed, or `... 2>&1 | head` has exited. Writing to it then raises BrokenPipeError, and from a
signal handler that exception surfaces wherever the trainer happens to be (in the middle of a
checkpoint, say). Such a message is dropped instead; the run goes on and saves its work.
"""

from __future__ import annotations

import sys
from typing import TextIO


def say(message: str, stream: TextIO | None = None) -> None:
    try:
        print(message, file=stream or sys.stderr, flush=True)
    except OSError:  # BrokenPipeError; EIO from a terminal that was closed
        pass
