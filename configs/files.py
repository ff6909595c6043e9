"""Files replaced whole: the one `atomic_write` of the learner, the run and the dashboard.

It lives in configs/, the floor every package may import, because the dashboard (an app apart)
may import nothing else of ours; it is plain file handling, with nothing of a config in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


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
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    """Make the renames done in `folder` durable; a filesystem that cannot fsync a folder is let be."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """`data` as indented JSON, replacing `path` whole (a summary, a population's state)."""
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
