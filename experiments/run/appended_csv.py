"""A CSV file a run appends rows to as they happen: the base of `games.csv` and `updates.csv`.

Both must stay consistent across `--resume`. A resumed run continues from its last checkpoint, so
the rows written after that checkpoint describe work the run does again (resumes are exact) and
are dropped before it starts: the file is rewritten with only the rows to keep, then appended to.

Rows are appended and flushed, not fsynced, so a machine that loses power (or a disk that fills)
in the middle of an append leaves a last line without its line end. That line is an append that
did not finish, not a row: readers leave it out (`read_rows`), and a resume drops it when the rows
before it reach the checkpoint (experiments/run/lifecycle.py `check_records`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from ppo.files import atomic_write


def read_rows(path: Path, columns: Sequence[str]) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each complete row of a CSV that must start with the header `columns`
    (a last line without its line end is left out: see `torn_last_line`); `ValueError` naming the
    file when the header is not that, or the line when a row's length is wrong."""
    data = path.read_bytes()  # once: a run may be appending to it while it is read
    if torn_last_line(data) is not None:
        data = data[:data.rindex(b"\n") + 1] if b"\n" in data else b""
    reader = csv.reader(io.StringIO(data.decode(), newline=""))
    header = next(reader, None)
    if header is None or tuple(header) != tuple(columns):
        raise ValueError(f"{path}: expected the header {','.join(columns)}, got {header}")
    rows = list(enumerate(reader, start=2))
    for line, row in rows:
        if len(row) != len(columns):
            raise ValueError(f"{path}:{line}: {row} has {len(row)} cells, expected {len(columns)} ({','.join(columns)})")
    return rows


def torn_last_line(data: bytes) -> int | None:
    """The number of the last line of a file's `data` if that line has no line end (an append cut
    short), else None. Every row is written whole with its line end (csv's `\r\n`), so only the
    last line can lack one."""
    if not data or data.endswith(b"\n"):
        return None
    return data.count(b"\n") + 1


Csv = TypeVar("Csv", bound="AppendedCsv")


class AppendedCsv:
    """`columns` as the header, then `kept` (the rows to keep from before, as cells), then whatever
    is appended, flushed after every append so a crash loses none."""

    def __init__(self, path: Path, columns: Sequence[str], kept: Iterable[Sequence[object]]) -> None:
        # Rewritten whole and renamed into place: a crash here leaves the old file, never half.
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(columns)
        writer.writerows(kept)
        atomic_write(path, text.getvalue().encode())
        self._file = path.open("a", newline="")
        self._writer = csv.writer(self._file)

    def _append(self, rows: Iterable[Sequence[object]]) -> None:
        self._writer.writerows(rows)
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self: Csv) -> Csv:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()
