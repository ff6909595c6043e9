"""Checks on untrusted input: run UUIDs, query parameters, JSON bodies, labml packets, file paths.

Each raises `BadRequest` with a message for the client, or answers whether a path is safe.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi import Request

from dashboard import schema
from dashboard.guard import parsed_json
from dashboard.strict_json import child_path, field_name
from dashboard.web import BadRequest

RUN_UUID_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
# What labml's client sends as run_uuid (uuid1().hex); "_" is kept out because labml-app reads
# "<uuid>_<n>" as rank n of a distributed run and fails on any other suffix.
TRACK_RUN_UUID_RE = re.compile(r"^[0-9A-Za-z-]{10,64}$")
VERSION_RE = re.compile(r"^[0-9]{1,6}(\.[0-9]{1,6}){0,3}$")
MAX_RANK = 1024
# A series is named in code ("loss.policy", "hp.learning_rate"; labml's own at most ~40 characters).
# 256 leaves room for generated and nested names, and keeps a name's copies in the store small
# beside what its points cost (usage.SERIES_BYTES): without a limit a name could be megabytes.
MAX_SERIES_NAME = 256


def _series(value: Any, path: str) -> None:
    schema.obj({"step": schema.list_of(schema.number, min_items=1, what="a non-empty list of numbers"),
                "value": schema.list_of(schema.number, min_items=1, what="a non-empty list of numbers")},
               required=("step", "value"))(value, path)
    if len(value["step"]) != len(value["value"]):
        raise BadRequest(400, f"field {path}: step has {len(value['step'])} items and value {len(value['value'])}; "
                              f"expected as many of each")


def _track(value: Any, path: str) -> None:
    schema.dict_of(_series)(value, path)
    for name in value:
        if len(name) > MAX_SERIES_NAME:
            raise BadRequest(400, f"{field_name(child_path(path, name))}: a series name of {len(name)} characters; "
                                  f"expected at most {MAX_SERIES_NAME}")


def run_statuses() -> tuple[str, ...]:
    """The statuses labml-app knows (its `RunEnums`): what labml's client sends at a run's end
    ('completed', 'interrupted', 'crashed') and what labml-app itself sets. labml-app ranks a run's
    stored status in a table of exactly these, so any other string made every page of the run a 500."""
    from labml_app.enums import RunEnums

    return tuple(value for name, value in vars(RunEnums).items() if name.startswith("RUN_") and isinstance(value, str))


def _run_status(value: Any, path: str) -> None:
    accepted = run_statuses()
    if value not in accepted:
        schema.fail(path, value, "one of " + ", ".join(f"'{s}'" for s in accepted))


# A labml client packet: every key labml-app reads, with the JSON types its readers assume
# (e.g. the run page formats `commit` as text and indexes `repo_remotes`).
PACKET = schema.obj({
    "name": schema.optional(schema.string), "comment": schema.optional(schema.string),
    "python_file": schema.optional(schema.string), "repo_remotes": schema.list_of(schema.string),
    "commit": schema.string, "commit_message": schema.optional(schema.string), "computer": schema.string,
    "start_step": schema.optional(schema.number), "tags": schema.list_of(schema.string),
    "pid": schema.integer, "main_rank": schema.integer, "time": schema.number,
    "configs": schema.dict_of(schema.obj({"name": schema.string, "computed": schema.anything},
                                         required=("name", "computed"))),
    "favorite_configs": schema.list_of(schema.string), "selected_configs": schema.list_of(schema.string),
    "indicators": schema.dict_of(schema.obj({})), "wildcard_indicators": schema.dict_of(schema.obj({})),
    "status": schema.obj({"rank": schema.integer, "status": _run_status, "time": schema.number}),
    "track": _track,
    "stdout": schema.string, "stderr": schema.string, "logger": schema.string,
})


def check_run_uuid(run_uuid: str) -> None:
    if not RUN_UUID_RE.match(run_uuid):
        raise BadRequest(400, f'invalid run UUID {run_uuid[:80]!r}: expected 1-64 letters, digits, "_" or "-"')


def known_run(run_uuid: str, what: str = "run") -> Any:
    """labml-app's record of the run: a 400 for a malformed uuid, a 404 for one it does not know
    (some of its handlers would create records for any uuid they are asked about)."""
    from labml_app.db import run as run_db

    check_run_uuid(run_uuid)
    r = run_db.get(run_uuid)
    if r is None:
        raise BadRequest(404, f"unknown {what} {run_uuid}")
    return r


def query_int(request: Request, name: str) -> int:
    raw = request.query_params.get(name, "0")
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(400, f"query parameter {name}={raw[:40]!r}: expected an integer") from None


def json_body(request: Request) -> Any:
    """The request's JSON body, as `guard.RequestGuard` parsed and checked it."""
    try:
        return parsed_json(request.scope)
    except KeyError:
        raise BadRequest(400, "expected a JSON body (Content-Type: application/json)") from None


def track_query(request: Request) -> tuple[str, str, int, int, int]:
    """(run_uuid, labml_version, rank, world_size, main_rank) of a `/track` request."""
    run_uuid = request.query_params.get("run_uuid", "")
    if not TRACK_RUN_UUID_RE.match(run_uuid):
        raise BadRequest(400, f'query parameter run_uuid={run_uuid[:80]!r}: expected 10-64 letters, digits or "-"')
    version = request.query_params.get("labml_version", "")
    if not VERSION_RE.match(version):
        raise BadRequest(400, f"query parameter labml_version={version[:40]!r}: expected a version such as 0.5.3")
    ranks = [query_int(request, name) for name in ("rank", "world_size", "main_rank")]
    for name, value in zip(("rank", "world_size", "main_rank"), ranks, strict=True):
        if not 0 <= value <= MAX_RANK:
            raise BadRequest(400, f"query parameter {name}={value}: expected an integer from 0 to {MAX_RANK}")
    return run_uuid, version, ranks[0], ranks[1], ranks[2]


def check_packets(body: Any) -> list[dict[str, Any]]:
    """A labml client's `/track` body (an object or a list of them) as a list of checked packets."""
    if isinstance(body, list):
        for i, packet in enumerate(body):
            PACKET(packet, f"[{i}]")
        return body
    PACKET(body, "")
    return [body]


def escapes(root: Path, rel: str) -> bool:
    """Whether `root/rel` resolves to somewhere outside `root` (or cannot be resolved at all)."""
    try:
        return not (root.resolve() / rel).resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return True
