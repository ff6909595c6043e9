"""Every node that runs a trial or a member must see the driver's `--data-dir`, at the same path.

A run writes its folder where its process runs. On a cluster whose nodes do not share that folder,
a sweep's or a population's runs would be split over machines, and the driver (which reads their
summaries, copies checkpoints between members and resumes lost runs from them) would not find them.
So a driver that uses Ray puts a marker into the data folder before it submits any task: a hidden
file, `.ray-node-check-<id>`, holding a fresh random token, written whole (atomic_write). The token
travels in the job's environment; each task reads the marker before it writes anything, and a node
that does not find it, token and all, refuses its run (`DataDirNotShared`), which the driver turns
into one line and exit code 2. The file is the driver's alone (its own name: drivers sharing a data
folder each keep theirs) and is removed when the driver ends; a driver killed outright leaves it,
a small hidden file that nothing reads again.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from configs.files import atomic_write

VARIABLE = "BREAKOUT_DATA_DIR_TOKEN"  # in every task's environment (the job's env_vars)
PREFIX = ".ray-node-check-"


class DataDirNotShared(RuntimeError):
    """This task's node does not see the driver's data folder; the message is the driver's line."""


class DataDirMark:
    """The driver's marker: `env` goes into the job's environment before Ray starts or is joined;
    `with` writes the marker (before any task is submitted) and removes it at the end."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        self.token = secrets.token_hex(16)
        self.path = marker_path(self.data_dir, self.token)

    @property
    def env(self) -> dict[str, str]:
        return {VARIABLE: self.token}

    def write(self) -> None:
        atomic_write(self.path, self.token.encode())  # makes the data folder, as the first run would

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> DataDirMark:
        self.write()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.remove()


def marker_path(data_dir: Path, token: str) -> Path:
    return data_dir / f"{PREFIX}{token[:16]}"


def check_data_dir_seen(data_dir: str) -> None:
    """In a task, before anything is written: raise `DataDirNotShared` unless this node sees the
    driver's marker in `data_dir`. A run started by no marking driver (no token) is let be."""
    token = os.environ.get(VARIABLE)
    if token is None:
        return
    try:
        seen = marker_path(Path(data_dir), token).read_bytes()
    except OSError:
        seen = b""
    if seen != token.encode():
        raise DataDirNotShared(f"--data-dir {data_dir}: node {_this_node()} cannot see this folder as the driver does "
                               "(its run was not started there); every node must see the same data folder at the same "
                               "path (docs/ray.md)")


def _this_node() -> str:
    """`<ip>/<node id prefix>` of the Ray node this task runs on (nodes of one machine share an ip)."""
    # Never imported here: a Ray worker has it already, and an import before a private Ray's start
    # would make that Ray listen beyond loopback (ray_setup/private.py refuses to start then).
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:12]}"
    return os.uname().nodename  # not in a Ray worker: the host is all there is to name


def refusal_in(error: BaseException) -> str | None:
    """The message of a task's `DataDirNotShared`, from the error Ray raised in the driver, or None."""
    cause: Any = getattr(error, "cause", None)
    for candidate in (cause, error):
        if isinstance(candidate, DataDirNotShared):
            return str(candidate.args[0]) if candidate.args else str(candidate)
    return None

