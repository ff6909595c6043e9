"""Text that came from outside (a dashboard's answer, a file of a run or population folder, a
checkpoint) on the owner's terminal.

A terminal obeys the control characters it is sent: ESC starts sequences that move the cursor,
rewrite lines already shown, set the window's title or, on some terminals, answer back as typed
input; CR and backspaces hide what came before them; a newline fakes a line of our own. Every
command that prints such text passes it through `escaped` first, so each control character shows
as the escape Python would write for it (ESC as `\\x1b`). In configs/, the one package every other
one may import (the dashboard's included).
"""

from __future__ import annotations


def escaped(text: object, *, lines: bool = False) -> str:
    """`str(text)` with every character that `str.isprintable` rejects (C0 and C1 controls, DEL,
    line and paragraph separators, invisible format characters such as the bidirectional
    overrides) written as its escape: `\\x1b`, `\\n`, `\\u202e`. Printable text, accents and
    symbols included, is unchanged; escaping twice changes nothing more. `lines`: keep `\\n` as a
    line end (for a message of several lines of our own; one-line messages escape it too)."""
    text = str(text)
    if lines:
        return "\n".join(escaped(line) for line in text.split("\n"))
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
