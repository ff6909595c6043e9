"""Atomic file writes for what a run keeps: checkpoints, summaries, the rewritten games.csv.
(The dashboard, an app of its own, keeps its own in dashboard/store.py.)"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers and crashes only ever see a whole file.

    The bytes go to a temp file in the same folder (a rename across filesystems is not atomic),
    are fsynced (without it a power loss can leave the renamed file empty on some filesystems),
    and only then renamed over `path`; the folder is fsynced so the rename itself is durable.
    On any error the temp file is removed and the old `path` is untouched.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
