"""Where runs live on disk: `data_dir/<experiment name>/<run uuid>/` (labml's layout), holding
labml's own files plus `checkpoints/checkpoint.pt` and `summary.json`."""

from __future__ import annotations

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
