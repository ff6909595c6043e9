"""Folders made once per test session and shared by every worker of it: a real run or population
that many tests only read or copy.

pytest-xdist runs test files on several workers (`--dist=loadfile`), each its own process, so a
module-level cache would make the same run once per worker. Here the first worker that asks makes
it, under a lock in a folder every worker of the session shares; the others wait on that lock and
then use what it made. Under `-n 0` the folder is this session's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

_root: Path | None = None


def set_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where this session's shared folders go: beside the workers' own base folders, in the one
    folder the session's workers share (pytest-xdist's recipe), or in this process's own without xdist."""
    global _root
    base = tmp_path_factory.getbasetemp()
    _root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "made-once"
    _root.mkdir(exist_ok=True)


def made_once(key: str, make: Callable[[Path], None]) -> Path:
    """The folder that `make(folder)` filled for `key` in this session. A `make` that raises leaves
    nothing marked as made: the next test that asks makes it again (and reports its own failure)."""
    assert _root is not None, "set_root runs first (an autouse session fixture in tests/conftest.py)"
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    folder, done = _root / name, _root / f"{name}.made"
    with (_root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the with block ends: one maker, the others wait
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a failed attempt's leftovers
            folder.mkdir()
            make(folder)
            done.touch()
    return folder
