"""`games.csv`: every finished game of a run, one row each, written as it happens.

Anyone can plot a run from this file alone (`python -m experiments.curves --runs DIR`). It stays
consistent across `--resume`: a resumed run continues from its last checkpoint, so the rows of
games that ended after that checkpoint are dropped first — the resumed run plays exactly those
games again (resumes are exact) and writes them anew. No duplicates, no gaps.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from experiments.run.appended_csv import AppendedCsv
from experiments.run.folders import read_record

CELLS = {"env_step": "int", "update": "int", "score": "float", "length": "int", "truncated": "bool"}
COLUMNS = tuple(CELLS)
ROW = f"a row of {','.join(COLUMNS)}"  # what a refusal says each row must be


class GameRow(NamedTuple):
    env_step: int
    update: int
    score: float
    length: int
    truncated: bool


def read_games(path: Path) -> list[GameRow]:
    """The rows of a games.csv (`read_record`); `ValueError` naming the file, the line and the cell
    when one is malformed (never the cell's text)."""
    return [GameRow(*values) for _, _, values in read_record(path, CELLS, ROW).rows]


def _cells(game: tuple[int, int, float, int, bool]) -> tuple[int, int, str, int, int]:
    env_step, update, score, length, truncated = game
    return env_step, update, f"{score:g}", length, int(truncated)


class GamesCsv(AppendedCsv):
    """Appends finished games to `path`, flushed after every batch so a crash loses none.

    `keep` is how many games the run had finished at the checkpoint it starts from (0 for a new
    run): rows past it are from games that will be played again, and are removed.
    """

    def __init__(self, path: Path, keep: int) -> None:
        kept = read_games(path)[:keep] if path.exists() else []
        super().__init__(path, COLUMNS, (_cells(game) for game in kept))

    def append(self, games: Iterable[tuple[int, int, float, int, bool]]) -> None:
        self._append(_cells(game) for game in games)
