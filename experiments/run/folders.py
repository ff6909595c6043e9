"""Where runs live on disk: `data_dir/<experiment name>/<run uuid>/` (labml's layout), holding
labml's own files plus ours: `summary.json`, `games.csv`, `updates.csv` and
`checkpoints/checkpoint.pt` (and the two before it). `RunFolder` owns one such folder: its paths
(spelled here once), finding it, checking it, writing its checkpoints and publishing its files,
releasing or clearing it. Every command that names a run goes through it; a training run adopts
its folder as soon as labml has made it."""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import os
import re
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from configs.fields import ConfigError
from configs.files import fsync_folder
from experiments.run.safe_files import UnsafeRunFolder, remove_dead_writers_files

RUN_UUID = re.compile(r"[0-9a-f]{32}")  # labml's, and a sweep's trials'
RUN_ID = re.compile(r"[0-9a-f]{8,32}")  # a uuid, or the first 8 or more of its digits (the dashboard shows 8)
# labml's own files, each opened in place (labml/internal/experiment/experiment_run.py `save_info`,
# labml/internal/experiment/__init__.py: configs, indicators, run_log): a second hard link to one of
# them is another file's content that labml would overwrite (experiments/run/safe_files.py).
WRITTEN_IN_PLACE = ("configs.yaml", "run.yaml", "indicators.yaml", "source.diff", "run_log.jsonl", "run.pid")
# Our files in a run folder. Every checkpoint a run keeps, newest first: one bad state never loses the run.
SUMMARY, GAMES, UPDATES, RUN_PID = "summary.json", "games.csv", "updates.csv", "run.pid"
CHECKPOINTS = ("checkpoints/checkpoint.pt", "checkpoints/checkpoint.1.pt", "checkpoints/checkpoint.2.pt")
MAX_ENTRIES = 100_000  # a run folder holds tens of files (a filmed run: one video per filmed update)
# What the cells of a record may hold (`read_record`), and how a refusal says it.
CELL_KINDS = {"int": "an integer", "float": "a number", "float?": "a number", "whole": "a whole number", "bool": "0 or 1"}


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


def check_plain_folder(folder: Path, second_name: Callable[[Path], str | None]) -> None:
    """Refuse (`UnsafeRunFolder`) a folder that is itself a link (or whose parent is), or that holds a
    symbolic link, a device, a FIFO or a socket anywhere, or a file with a second hard link where
    `second_name(path)` says why that is harmful (None where a second name is harmless). Only `lstat`
    is used: nothing is opened, so nothing is read through a link."""
    for path in (folder.parent, folder):
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise UnsafeRunFolder(f"{path} is a symbolic link, not a folder")
    seen, pending = 0, [folder]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise UnsafeRunFolder(f"{folder} holds over {MAX_ENTRIES:,} files and folders")
                info, path = entry.stat(follow_symlinks=False), Path(entry.path)
                if stat.S_ISLNK(info.st_mode):
                    raise UnsafeRunFolder(f"{path} is a symbolic link, which would be read or written through")
                if stat.S_ISDIR(info.st_mode):
                    pending.append(path)
                elif not stat.S_ISREG(info.st_mode):
                    raise UnsafeRunFolder(f"{path} is not a regular file (a device, FIFO or socket)")
                elif info.st_nlink > 1 and (why := second_name(path)) is not None:
                    raise UnsafeRunFolder(f"{path} has {info.st_nlink} hard links, and {why} "
                                          "(the file of its other names would change too)")



@dataclass(frozen=True)
class RunFolder:
    """Run `uuid`'s folder `path`: found by the run's uuid or its first digits (`named`), checked
    before a byte of it is read and its owner told (`check`), its files named (`summary`, …), its
    checkpoints written (`rotate_in`) and its files given the folder's mode (`publish`), released
    by a resume and cleared after a lost start."""

    path: Path
    uuid: str

    @classmethod
    def at(cls, path: Path) -> RunFolder:
        """The folder at `path`, named by its last part (labml's layout: the run's uuid)."""
        return cls(path, path.name)

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def games_csv(self) -> Path:
        return self.path / GAMES

    @property
    def updates_csv(self) -> Path:
        return self.path / UPDATES

    @property
    def checkpoints(self) -> tuple[Path, ...]:
        """Every checkpoint the run keeps, newest first (`checkpoint.pt`, `checkpoint.1.pt`, …)."""
        return tuple(self.path / name for name in CHECKPOINTS)

    @property
    def newest_checkpoint(self) -> Path:
        """What --resume, evaluation and every summary use."""
        return self.path / CHECKPOINTS[0]

    def publish(self, path: Path) -> Path:
        """`publish` for a file of this folder; returns it."""
        publish(path)
        return path

    def rotate_in(self, write: Callable[[Path], None]) -> Path:
        """Write a new newest checkpoint with `write(path)` and keep the ones before it (CHECKPOINTS).

        The new file is written whole (and fsynced) under a staging name first; only then do renames
        shift the older ones (checkpoint.1.pt → checkpoint.2.pt, a hard link of checkpoint.pt →
        checkpoint.1.pt) and put the new one in place. Every step is one atomic rename, so at any
        moment a crash leaves `checkpoint.pt` whole — the old or the new one — and a failed write
        (a full disk) changes nothing at all.
        """
        paths = self.checkpoints
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

    def check(self) -> int | None:
        """Refuse (`UnsafeRunFolder`, `check_plain_folder`) a folder that is itself a link, or holds a
        symbolic link, a device, a FIFO or a socket anywhere, or a second hard link of a file that
        labml writes in place.

        Then, the folder known to be plain, who owns it: the pid of a live process that runs it
        (labml's `run.pid`), or None. labml writes `run.pid` at start and never removes it, and
        refuses to start a run whose file exists; a resume removes a stale one (`release`), never one
        whose process is still alive."""
        def written_in_place(path: Path) -> str | None:
            return "labml rewrites it in place" if path.parent == self.path and path.name in WRITTEN_IN_PLACE else None
        check_plain_folder(self.path, written_in_place)
        return self.owner()

    def owner(self) -> int | None:
        """The pid of a live process that runs the run (labml's `run.pid`), or None: one small read,
        never through a link (one put there since the check is no owner), for a folder already checked."""
        try:
            fd = os.open(self.path / RUN_PID, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                pid = int(os.read(fd, 32).decode().strip())
            finally:
                os.close(fd)
        except (OSError, ValueError):  # none there, or not a pid file of labml's (a link: ELOOP)
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # another account's process: alive
        return pid

    def release(self) -> None:
        """Remove what the run's dead process left: a stale `run.pid` (so labml can record the resumed
        session) and the temp files of a write it was killed in (`remove_dead_writers_files`)."""
        (self.path / RUN_PID).unlink(missing_ok=True)
        for folder in (self.path, self.newest_checkpoint.parent):
            remove_dead_writers_files(folder)

    def remove_lost_start(self) -> None:
        """Clear the folder of a run lost before its first checkpoint (a sweep's trial, a population's
        member, run again under its uuid): labml refuses to start a run whose folder holds a `run.pid`,
        and nothing there can be resumed (its records are of updates no checkpoint kept; the new start
        makes them again). Refused (`UnsafeRunFolder`, one line) while a process still runs it, or
        when the folder is not a plain one of ours (a link, a FIFO...): nothing is removed then."""
        if (pid := self.check()) is not None:  # first: nothing is read through a link
            raise UnsafeRunFolder(f"run folder {self.path}: process {pid} still runs it, so the trial cannot start again there")
        shutil.rmtree(self.path)


class Record(NamedTuple):
    rows: list[tuple[int, list[str], tuple[Any, ...]]]  # (line number, cells, values) of each whole row
    torn_line: int | None  # the number of a last line without its line end: an append cut short


def read_record(path: Path, cells: Mapping[str, str], what: str) -> Record:
    """The one reader of the records a run appends to (games.csv, updates.csv), each read once: a
    CSV that must start with the header `cells` (column → the kind of value it holds, CELL_KINDS;
    `float?` may be empty, as None). Every row is written whole with its line end (csv's `\r\n`), so a
    last line without one is an append the run's end cut short, not a row (experiments/run/appended_csv.py).
    `ValueError` naming the file, and the line and the cell where one is not `what` ("a row of
    numbers"). A message never quotes the file: a run folder may hold a file put there by someone
    else, or a link to one."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would be waited on forever, a device read without end
        raise ValueError(f"{path}: not a regular file (a folder, device, FIFO or socket)")
    data = path.read_bytes()  # once: a run may be appending to it while it is read
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start:,} cannot be decoded)") from None
    torn = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else None
    if torn is not None:
        text = text[:text.rindex("\n") + 1] if "\n" in text else ""
    columns, reader = tuple(cells), csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None or tuple(header) != columns:
            found = "it holds something else" if header is not None else "it holds no whole line" if data else "the file is empty"
            raise ValueError(f"{path}: expected the header {','.join(columns)} on its first line ({found})")
        rows = list(enumerate(reader, start=2))
    except csv.Error as e:  # csv's own messages name what is wrong, not the text
        raise ValueError(f"{path}:{reader.line_num}: not a CSV row ({e})") from None
    def whole(cell: str) -> float:
        if not (number := float(cell)).is_integer():
            raise ValueError("not a whole number")
        return number
    parse: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "float?": lambda cell: float(cell) if cell else None,
                                              "whole": whole, "bool": {"0": False, "1": True}.__getitem__}
    record = Record([], torn)
    for line, row in rows:
        if len(row) != len(columns):
            raise ValueError(f"{path}:{line}: {len(row)} cells, expected {len(columns)} ({','.join(columns)})")
        values = []
        for name, cell in zip(columns, row, strict=True):
            try:
                values.append(parse[cells[name]](cell))
            except (ValueError, KeyError):  # named, never quoted
                raise ValueError(f"{path}:{line}: not {what} (its {name} is not {CELL_KINDS[cells[name]]})") from None
        record.rows.append((line, row, tuple(values)))
    return record
