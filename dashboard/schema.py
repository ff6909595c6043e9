"""Small checks for the shape of JSON bodies, composed into one check per endpoint.

A check is called with the value and its path in the body (``""`` for the body itself) and
raises `BadRequest` (400) naming the field, a preview of the value and what is accepted.
Keys an object check does not list are let through: labml-app ignores keys it does not read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import NoReturn

from dashboard.strict_json import child_path, field_name
from dashboard.web import BadRequest

Check = Callable[[object, str], None]


def preview(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def fail(path: str, value: object, expected: str) -> NoReturn:
    raise BadRequest(400, f"{field_name(path)}: expected {expected}, got {preview(value)}")


def string(value: object, path: str) -> None:
    if not isinstance(value, str):
        fail(path, value, "a string")


def boolean(value: object, path: str) -> None:
    if not isinstance(value, bool):
        fail(path, value, "true or false")


def integer(value: object, path: str) -> None:
    # bool is an int subclass in Python but not in JSON.
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, value, "an integer")


def number(value: object, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(path, value, "a number")


def anything(value: object, path: str) -> None:
    """Any JSON value (`strict_json` has already refused what the store cannot hold)."""


def optional(check: Check) -> Check:
    def check_optional(value: object, path: str) -> None:
        if value is not None:
            check(value, path)

    return check_optional


def list_of(check: Check, *, min_items: int = 0, max_items: int | None = None, what: str = "a list") -> Check:
    def check_list(value: object, path: str) -> None:
        if not isinstance(value, list) or len(value) < min_items or (max_items is not None and len(value) > max_items):
            fail(path, value, what)
        for i, item in enumerate(value):
            check(item, f"{path}[{i}]")

    return check_list


def dict_of(check: Check) -> Check:
    def check_dict(value: object, path: str) -> None:
        if not isinstance(value, dict):
            fail(path, value, "an object")
        for key, item in value.items():
            check(item, child_path(path, key))

    return check_dict


def obj(fields: Mapping[str, Check], *, required: tuple[str, ...] = ()) -> Check:
    def check_object(value: object, path: str) -> None:
        if not isinstance(value, dict):
            fail(path, value, "an object")
        for key in required:
            if key not in value:
                raise BadRequest(400, f"{field_name(child_path(path, key))} is missing")
        for key, check in fields.items():
            if key in value:
                check(value[key], child_path(path, key))

    return check_object

