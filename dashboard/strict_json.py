"""JSON bodies parsed strictly: only what every later reader of the store can handle gets in.

Python's `json` accepts input that poisons the store for everyone who reads it afterwards:
``NaN``/``Infinity`` (and ``1e400``, which overflows to infinity) make labml-app's JSON answers
fail; a lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8, so every page listing that
string fails; a 5000-digit integer raises in the parser itself; deep nesting exhausts the
recursion limit.  `loads` refuses each of these with a `BadRequest` naming where it is.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dashboard.web import BadRequest

# labml's packets nest about six levels (list > packet > configs > key > computed > range).
MAX_DEPTH = 32
# Integers must fit a signed 64-bit integer (steps, pids, ranks); numpy and MongoDB need no more.
INT_LIMIT = 2 ** 63
PREVIEW_CHARS = 40


class _Refused:
    """Stands in for a literal the parser met but the store must not take; reported with its path."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _parse_constant(name: str) -> _Refused:
    return _Refused(f"{name} is not allowed; expected a finite number")


def _parse_float(text: str) -> float | _Refused:
    value = float(text)
    if not math.isfinite(value):
        return _Refused(f"{text[:PREVIEW_CHARS]} is out of range; expected a finite 64-bit number")
    return value


def _parse_int(text: str) -> int | _Refused:
    digits = len(text.lstrip("-"))
    # Checked before int(), which itself refuses more than 4300 digits with a ValueError.
    if digits > 19 or not -INT_LIMIT <= int(text) < INT_LIMIT:
        return _Refused(f"an integer of {digits} digits is out of range; expected a 64-bit integer")
    return int(text)


def field_name(path: str) -> str:
    if len(path) > 2 * PREVIEW_CHARS:  # e.g. deep nesting: its start and end say enough
        path = f"{path[:PREVIEW_CHARS]}...{path[-PREVIEW_CHARS:]}"
    return f"field {path}" if path else "the body"


def child_path(path: str, key: str) -> str:
    """`path.key` for plain keys, `path["key"]` (truncated, ASCII) for any other."""
    if key.isidentifier() and key.isascii():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key[:PREVIEW_CHARS])}]"


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadRequest(400, f"{field_name(path)}: {text[:PREVIEW_CHARS]!a} has a lone surrogate "
                              f"at index {e.start}; expected valid Unicode text") from None


def _children(value: Any, path: str) -> list[tuple[Any, str]]:
    if isinstance(value, dict):
        for key in value:
            # A key is checked as the path it names, so the message points at the object holding it.
            _check_text(key, path)
        return [(item, child_path(path, key)) for key, item in value.items()]
    if isinstance(value, list):
        return [(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return []


def check_tree(value: Any) -> None:
    """Refuse placeholders, lone surrogates and nesting past MAX_DEPTH anywhere in `value`."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]  # the body itself is the first level
    while stack:
        item, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(400, f"{field_name(path)} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, _Refused):
            raise BadRequest(400, f"{field_name(path)}: {item.reason}")
        if isinstance(item, str):
            _check_text(item, path)
        else:
            stack.extend((child, child_at, depth + 1) for child, child_at in _children(item, path))


def loads(raw: bytes) -> Any:
    """The JSON document in `raw`, or `BadRequest` (400) saying what is wrong and where."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"the body is not UTF-8 (byte {e.start}); expected a UTF-8 JSON document") from None
    try:
        value = json.loads(text, parse_constant=_parse_constant, parse_float=_parse_float, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        raise BadRequest(400, f"malformed JSON body: {e}") from None
    except RecursionError:
        raise BadRequest(400, f"the body is nested deeper than {MAX_DEPTH} levels") from None
    check_tree(value)
    return value
