"""A CSV file a run appends rows to as they happen: the base of `games.csv` and `updates.csv`.

Both must stay consistent across `--resume`. A resumed run continues from its last checkpoint, so
the rows written after that checkpoint describe work the run does again (resumes are exact) and
are dropped before it starts: the file is rewritten with only the rows to keep, then appended to.

Rows are appended and flushed, not fsynced, so a machine that loses power (or a disk that fills)
in the middle of an append leaves a last line without its line end. That line is an append that
did not finish, not a row: readers leave it out (`read_rows`), and a resume drops it when the rows
before it reach the checkpoint (the resume's checks of the run folder's records).
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from configs.files import atomic_write
from experiments.run.folder_checks import open_own_file


def read_rows(path: Path, columns: Sequence[str]) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each complete row of a CSV that must start with the header `columns`
    (a last line without its line end is left out: see `torn_last_line`); `ValueError` naming the
    file, and the line where one is wrong, when it is not such a CSV. A message never quotes the
    file: a run folder may hold a file put there by someone else, or a link to one."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would be waited on forever, a device read without end
        raise ValueError(f"{path}: not a regular file (a folder, device, FIFO or socket)")
    data = path.read_bytes()  # once: a run may be appending to it while it is read
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start:,} cannot be decoded)") from None
    if torn_last_line(data) is not None:
        text = text[:text.rindex("\n") + 1] if "\n" in text else ""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None or tuple(header) != tuple(columns):
            what = "it holds something else" if header is not None else "it holds no whole line" if data else "the file is empty"
            raise ValueError(f"{path}: expected the header {','.join(columns)} on its first line ({what})")
        rows = list(enumerate(reader, start=2))
    except csv.Error as e:  # csv's own messages name what is wrong, not the text
        raise ValueError(f"{path}:{reader.line_num}: not a CSV row ({e})") from None
    for line, row in rows:
        if len(row) != len(columns):
            raise ValueError(f"{path}:{line}: {len(row)} cells, expected {len(columns)} ({','.join(columns)})")
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
        # A link put in the file's place since the rename (a symbolic or a hard one) is refused, never appended through.
        self._file = os.fdopen(open_own_file(path, os.O_WRONLY | os.O_APPEND), "a", newline="")
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
