"""Checks on untrusted input: run UUIDs, query integers, JSON bodies, labml packets, file paths.

Each raises `BadRequest` with a message for the client, or answers whether a path is safe.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi import Request

from dashboard.guard import parsed_json
from dashboard.web import BadRequest

RUN_UUID_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
# Top-level keys of a labml client packet, with the JSON types labml-app assumes.
PACKET_TYPES: dict[str, tuple] = {
    "configs": (dict,), "track": (dict,), "status": (dict,), "stdout": (str,), "stderr": (str,),
    "logger": (str,), "time": (int, float), "name": (str,), "comment": (str,), "tags": (list,),
    "indicators": (dict,), "wildcard_indicators": (dict,), "pid": (int,),
}


def check_run_uuid(run_uuid: str) -> None:
    if not RUN_UUID_RE.match(run_uuid):
        raise BadRequest(400, f'invalid run UUID {run_uuid[:80]!r}: expected 1-64 letters, digits, "_" or "-"')


def query_int(request: Request, name: str) -> int:
    raw = request.query_params.get(name, "0")
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(400, f"query parameter {name}={raw[:40]!r}: expected an integer") from None


def json_body(request: Request) -> Any:
    """The request's JSON body, as `guard.RequestGuard` parsed it."""
    try:
        return parsed_json(request.scope)
    except KeyError:
        raise BadRequest(400, "expected a JSON body (Content-Type: application/json)") from None


def check_packets(body: Any) -> None:
    """A labml client's `/track` body: an object or a list of them, with the field types labml-app assumes."""
    packets = body if isinstance(body, list) else [body]
    for packet in packets:
        if not isinstance(packet, dict):
            raise BadRequest(400, "expected a JSON object or a list of objects")
        for key, types in PACKET_TYPES.items():
            if key in packet and packet[key] is not None and not isinstance(packet[key], types):
                raise BadRequest(400, f"field {key!r} has the wrong type ({type(packet[key]).__name__})")
        configs = packet.get("configs") or {}
        for name, config in configs.items():
            if not isinstance(config, dict) or "name" not in config or "computed" not in config:
                raise BadRequest(400, f'configs[{name!r}]: expected an object with "name" and "computed"')


def safe_file(root: Path, rel: str) -> Path | None:
    """`root/rel` if it is a file inside `root` (after resolving `..` and links), else None."""
    root = root.resolve()
    try:
        candidate = (root / rel).resolve()
    except (OSError, ValueError):  # e.g. NUL bytes, symlink loops
        return None
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def escapes(root: Path, rel: str) -> bool:
    """Whether `root/rel` resolves to somewhere outside `root` (or cannot be resolved at all)."""
    try:
        return not (root.resolve() / rel).resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return True
