"""Where runs live on disk: `data_dir/<experiment name>/<run uuid>/` (labml's layout), holding
labml's own files plus `checkpoints/checkpoint.pt` (and the two before it) and `summary.json`.
`RunFolder` owns one such folder: every command that names a run finds it, checks it, and clears
or releases it through that class."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import itertools
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from configs.fields import ConfigError
from configs.files import fsync_folder
from experiments.run.appended_csv import torn_last_line
from experiments.run.folder_checks import UnsafeRunFolder, check_folder, remove_dead_writers_files
from experiments.run.games_csv import read_games
from experiments.run.updates_csv import read_update_numbers

if TYPE_CHECKING:
    from ppo.checkpoint import ResumePoint

CHECKPOINT_NAME = "checkpoint.pt"
RUN_UUID = re.compile(r"[0-9a-f]{32}")  # labml's, and a sweep's trials'
RUN_ID = re.compile(r"[0-9a-f]{8,32}")  # a uuid, or the first 8 or more of its digits (the dashboard shows 8)
# labml's own files, each opened in place (labml/internal/experiment/experiment_run.py `save_info`,
# labml/internal/experiment/__init__.py: configs, indicators, run_log): a second hard link to one of
# them is another file's content that labml would overwrite (experiments/run/folder_checks.py).
WRITTEN_IN_PLACE = ("configs.yaml", "run.yaml", "indicators.yaml", "source.diff", "run_log.jsonl", "run.pid")
KEEP_CHECKPOINTS = 3  # checkpoint.pt, checkpoint.1.pt, checkpoint.2.pt: one bad state never loses the run


def checkpoint_path(run_dir: Path) -> Path:
    """The newest checkpoint: what --resume, evaluation and every summary use."""
    return run_dir / "checkpoints" / CHECKPOINT_NAME


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """Every checkpoint a run keeps, newest first (`checkpoint.pt`, `checkpoint.1.pt`, …)."""
    folder = run_dir / "checkpoints"
    return [folder / CHECKPOINT_NAME] + [folder / f"checkpoint.{i}.pt" for i in range(1, KEEP_CHECKPOINTS)]


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


@dataclass(frozen=True)
class RunFolder:
    """Run `uuid`'s folder `path`: found by the run's uuid or its first digits (`named`), checked
    before a byte of it is read (`check`), owned by at most one live process (`owner`), its records
    checked against a checkpoint, released by a resume and cleared after a lost start."""

    path: Path
    uuid: str

    @classmethod
    def named(cls, data_dir: Path, name: str, option: str) -> RunFolder | None:
        """The run under `data_dir` that `name` names: its uuid, or the first 8 or more of its digits
        when no other run there begins so (the dashboard shows 8); None when none does, and
        `ConfigError` (`option` and the candidates, in one line) when several do."""
        if not RUN_ID.fullmatch(name) or not data_dir.is_dir():
            return None
        found = sorted(p for p in data_dir.glob(f"*/{name}*") if RUN_UUID.fullmatch(p.name) and p.is_dir())
        if len({p.name for p in found}) > 1:
            listed = ", ".join(f"{p.parent.name}/{p.name}" for p in found[:10])
            raise ConfigError(option, name, f"the id of one run; {len(found)} runs under {data_dir}/ begin so: {listed}")
        return cls(found[0], found[0].name) if found else None

    @staticmethod
    def none_named(data_dir: Path) -> str:
        """Why no run was found under `data_dir`: the runs that are there (a few), or that there are none."""
        if not data_dir.is_dir():
            return "that folder does not exist"
        runs = sorted(f"{p.parent.name}/{p.name}" for p in data_dir.glob("*/*") if RUN_UUID.fullmatch(p.name) and p.is_dir())
        if not runs:
            return "it holds no run"
        return f"none there has that uuid; it holds {len(runs)} run{'s' if len(runs) > 1 else ''}, such as {', '.join(runs[:3])}"

    def check(self) -> None:
        """Refuse (`UnsafeRunFolder`) a folder that is itself a link, or holds a symbolic link, a
        device, a FIFO or a socket anywhere, or a second hard link of a file labml writes in place.
        Only `lstat` is used: nothing is opened, so nothing is read through a link."""
        check_folder(self.path, lambda path: "labml rewrites it in place"
                     if path.parent == self.path and path.name in WRITTEN_IN_PLACE else None)

    def owner(self) -> int | None:
        """The pid of a live process that owns this run (labml's `run.pid`), or None. labml writes
        `run.pid` at start and never removes it, and refuses to start a run whose file exists; a
        resume removes a stale one (`release`), never one whose process is still alive."""
        try:
            pid = int((self.path / "run.pid").read_text().strip())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        except PermissionError:
            pass
        return pid

    def resume_point(self) -> ResumePoint:
        """What a resume goes on from, each part of the folder read once, in the order that keeps
        reading safe: the folder itself (`check`: before a byte of it is read), its owner, its
        records, then its last good checkpoint, checked whole (`ppo.checkpoint.read_resume_point`);
        `ConfigError` or `CheckpointError` in one line otherwise.

        The resume keeps the records' rows up to the checkpoint, so a games.csv or updates.csv that
        cannot be read is refused here. A last line without its line end is an append the run's end
        cut short (experiments/run/appended_csv.py): the resume drops it, as it drops every row after
        the checkpoint, when the whole rows before it reach the checkpoint (then the cut row came
        after it); when they do not, rows the checkpoint counts are missing, and it refuses rather
        than leave a gap."""
        from ppo.checkpoint import read_resume_point

        try:
            self.check()
        except UnsafeRunFolder as e:
            raise ConfigError("resume", self.uuid, f"a run folder of plain files and folders ({e}; nothing was read or written)") from None
        if (pid := self.owner()) is not None and pid != os.getpid():
            raise ConfigError("resume", self.uuid, f"a run that is not running (process {pid} is still running it)")
        games_path, updates_path = self.path / "games.csv", self.path / "updates.csv"
        try:
            games = len(read_games(games_path)) if games_path.exists() else 0
            updates = read_update_numbers(updates_path) if updates_path.exists() else []
            torn = {path: line for path in (games_path, updates_path)
                    if path.exists() and (line := torn_last_line(path.read_bytes())) is not None}
        except (ValueError, OSError, csv.Error) as e:
            raise ConfigError("resume", self.uuid, f"a run whose records can be read ({e})") from None
        point = read_resume_point(checkpoint_paths(self.path))
        counted_games, counted_update = point.checkpoint.games, point.checkpoint.update
        reach = {games_path: (games >= counted_games, games, f"the {counted_games!r} games its checkpoint counts"),
                 updates_path: (bool(updates) and updates[-1] >= counted_update, len(updates), f"update {counted_update!r}, its checkpoint's")}
        notes = []
        for path, line in torn.items():
            reached, whole_rows, what = reach[path]
            if not reached:
                raise ConfigError("resume", self.uuid, f"a run whose records reach its checkpoint ({path}:{line} was cut "
                                                       f"short in the middle of an append, and the {whole_rows} whole rows "
                                                       f"before it do not reach {what})")
            notes.append(f"note: {path}:{line} was cut short in the middle of an append when the run ended; "
                         "it comes after the checkpoint, and the resume drops it")
        return dataclasses.replace(point, notes=point.notes + tuple(notes))

    def release(self) -> None:
        """Remove what the run's dead process left: a stale `run.pid` (so labml can record the resumed
        session) and the temp files of a write it was killed in (`remove_dead_writers_files`)."""
        (self.path / "run.pid").unlink(missing_ok=True)
        for folder in (self.path, checkpoint_path(self.path).parent):
            remove_dead_writers_files(folder)

    def remove_lost_start(self) -> None:
        """Clear the folder of a run lost before its first checkpoint (a sweep's trial, a population's
        member, run again under its uuid): labml refuses to start a run whose folder holds a `run.pid`,
        and nothing there can be resumed (its records are of updates no checkpoint kept; the new start
        makes them again). Refused (`UnsafeRunFolder`, one line) while a process still runs it, or
        when the folder is not a plain one of ours (a link, a FIFO...): nothing is removed then."""
        self.check()  # first: nothing is read through a link
        if (pid := self.owner()) is not None:
            raise UnsafeRunFolder(f"run folder {self.path}: process {pid} still runs it, so the trial cannot start again there")
        shutil.rmtree(self.path)
