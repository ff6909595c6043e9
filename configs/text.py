"""Text received from outside (a dashboard's answer, a run folder, a checkpoint), made safe to print."""

from __future__ import annotations


def printable(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters, each control character shown as `?`: an escape sequence
    from outside must never reach the user's terminal."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])
