"""Where runs live on disk: `data_dir/<experiment name>/<run uuid>/` (labml's layout), holding
labml's own files plus `checkpoints/checkpoint.pt` and `summary.json`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ppo.checkpoint import CHECKPOINT_NAME

_UUID = re.compile(r"^[0-9a-f]{32}$")


def checkpoint_path(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / CHECKPOINT_NAME


def find_run(data_dir: Path, run_uuid: str) -> Path | None:
    """The folder of run `run_uuid` under `data_dir`, or None."""
    if not _UUID.match(run_uuid):
        return None
    matches = [p for p in data_dir.glob(f"*/{run_uuid}") if p.is_dir()]
    return matches[0] if matches else None


def running_pid(run_dir: Path) -> int | None:
    """The pid of a live process that owns this run (labml's `run.pid`), or None.

    labml writes `run.pid` at start and never removes it, and refuses to start a run whose
    file exists; a resume removes a stale one, but never one whose process is still alive.
    """
    pid_file = run_dir / "run.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def release_run(run_dir: Path) -> None:
    """Remove a stale `run.pid` so labml can record the resumed session."""
    (run_dir / "run.pid").unlink(missing_ok=True)
