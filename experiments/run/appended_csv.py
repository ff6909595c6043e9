"""A CSV file a run appends rows to as they happen: the base of `games.csv` and `updates.csv`.

Both must stay consistent across `--resume`. A resumed run continues from its last checkpoint, so
the rows written after that checkpoint describe work the run does again (resumes are exact) and
are dropped before it starts: the file is rewritten with only the rows to keep, then appended to.

Rows are appended and flushed, not fsynced, so a machine that loses power (or a disk that fills)
in the middle of an append leaves a last line without its line end. That line is an append that
did not finish, not a row: the one reader of these files leaves it out
(`experiments.run.folders.read_record`), and a resume drops it when the rows before it reach the
checkpoint (experiments/run/plan.py).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from configs.files import atomic_write
from experiments.run.safe_files import open_own_file

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
