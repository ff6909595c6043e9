"""Ray's exceptions as one line of ours. Ray's text for an error is coloured (ANSI escapes) and
spans lines: a header saying what happened, then, for a task that raised, its traceback and last
the cause's own message. Every driver and pool quotes it through these two."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    """`text` without Ray's colours."""
    return _ANSI.sub("", text)


def _lines(e: BaseException) -> list[str]:
    return [line.strip() for line in plain(str(e)).splitlines() if line.strip()]


def first_line(e: BaseException) -> str:
    """What happened, as Ray's header says it (a refused connection, an actor or node gone); the
    exception's type where its text is empty."""
    lines = _lines(e)
    return lines[0] if lines else type(e).__name__


def cause_line(e: BaseException) -> str:
    """Why a task failed: its cause's own message, which Ray puts last; the type where there is no text."""
    lines = _lines(e)
    return lines[-1] if lines else type(e).__name__
