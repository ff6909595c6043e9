"""Where runs live on disk: `data_dir/<experiment name>/<run uuid>/` (labml's layout), holding
labml's own files plus `checkpoints/checkpoint.pt` (and the two before it) and `summary.json`."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

from configs.files import fsync_folder
from experiments.run.folder_checks import remove_dead_writers_files

CHECKPOINT_NAME = "checkpoint.pt"
RUN_UUID = re.compile(r"[0-9a-f]{32}")  # labml's, and a sweep's trials'

_UUID = re.compile(r"^[0-9a-f]{32}$")
KEEP_CHECKPOINTS = 3  # checkpoint.pt, checkpoint.1.pt, checkpoint.2.pt: one bad state never loses the run


def checkpoint_path(run_dir: Path) -> Path:
    """The newest checkpoint: what --resume, evaluation and every summary use."""
    return run_dir / "checkpoints" / CHECKPOINT_NAME


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """Every checkpoint a run keeps, newest first (`checkpoint.pt`, `checkpoint.1.pt`, …)."""
    latest = checkpoint_path(run_dir)
    return [latest] + [latest.with_name(f"{latest.stem}.{i}{latest.suffix}") for i in range(1, KEEP_CHECKPOINTS)]


@cache
def file_mode() -> int:
    """The mode of a file created by this process: 0666 less the umask (0644 under the usual 022),
    as labml's own files get. Atomic writes go through `mkstemp`, which makes 0600 files; run files
    get this mode instead, so a data dir shared through group permissions works for every file."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(umask)
    return 0o666 & ~umask


def publish(path: Path) -> None:
    """Give a file the run folder's usual mode (see `file_mode`); a link in its place is refused
    (ELOOP), not followed: the mode of a file elsewhere is never changed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, file_mode())
    finally:
        os.close(fd)


def rotate_in(run_dir: Path, write: Callable[[Path], None]) -> Path:
    """Write a new newest checkpoint with `write(path)` and keep the KEEP_CHECKPOINTS − 1 before it.

    The new file is written whole (and fsynced) under a staging name first; only then do renames
    shift the older ones (checkpoint.1.pt → checkpoint.2.pt, a hard link of checkpoint.pt →
    checkpoint.1.pt) and put the new one in place. Every step is one atomic rename, so at any
    moment a crash leaves `checkpoint.pt` whole — the old or the new one — and a failed write
    (a full disk) changes nothing at all.
    """
    paths = checkpoint_paths(run_dir)
    latest = paths[0]
    remove_dead_writers_files(latest.parent)  # a killed writer's: this process is the run's only writer
    staged = latest.with_name(f".{latest.name}.next")
    write(staged)  # raises on failure: nothing rotated yet
    publish(staged)
    for newer, older in reversed(list(itertools.pairwise(paths))[1:]):  # oldest first: .1 → .2
        if newer.exists():
            os.replace(newer, older)
    if latest.exists() and len(paths) > 1:
        link = paths[1].with_name(f".{paths[1].name}.link")
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        try:
            os.link(latest, link)
        except OSError:  # a filesystem without hard links: a copy does too
            shutil.copyfile(latest, link)
            publish(link)
        os.replace(link, paths[1])
    os.replace(staged, latest)
    fsync_folder(latest.parent)  # the renames themselves durable
    return latest


def find_run(data_dir: Path, run_uuid: str) -> Path | None:
    """The folder of run `run_uuid` under `data_dir`, or None."""
    if not _UUID.match(run_uuid):
        return None
    matches = [p for p in data_dir.glob(f"*/{run_uuid}") if p.is_dir()]
    return matches[0] if matches else None


def no_such_run(data_dir: Path) -> str:
    """Why no run was found under `data_dir`: the runs that are there (a few), or that there are none."""
    if not data_dir.is_dir():
        return "that folder does not exist"
    runs = sorted(f"{p.parent.name}/{p.name}" for p in data_dir.glob("*/*") if RUN_UUID.fullmatch(p.name) and p.is_dir())
    if not runs:
        return "it holds no run"
    return f"none there has that uuid; it holds {len(runs)} run{'s' if len(runs) > 1 else ''}, such as {', '.join(runs[:3])}"


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
    """Remove what the run's dead process left: a stale `run.pid` (so labml can record the resumed
    session) and the temp files of a write it was killed in (`remove_dead_writers_files`)."""
    (run_dir / "run.pid").unlink(missing_ok=True)
    for folder in (run_dir, checkpoint_path(run_dir).parent):
        remove_dead_writers_files(folder)
