"""`games.csv`: every finished game of a run, one row each, written as it happens.

Anyone can plot a run from this file alone (`python -m experiments.curves --runs DIR`). It stays
consistent across `--resume`: a resumed run continues from its last checkpoint, so the rows of
games that ended after that checkpoint are dropped first — the resumed run plays exactly those
games again (resumes are exact) and writes them anew. No duplicates, no gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from experiments.run.appended_csv import AppendedCsv, read_rows

COLUMNS = ("env_step", "update", "score", "length", "truncated")


class GameRow(NamedTuple):
    env_step: int
    update: int
    score: float
    length: int
    truncated: bool


def read_games(path: Path) -> list[GameRow]:
    """The rows of a games.csv; `ValueError` naming the file, the line and the cell when one is
    malformed (never the cell's text: see `read_rows`)."""
    games = []
    for line, row in read_rows(path, COLUMNS):
        cells = dict(zip(COLUMNS, row, strict=True))
        try:
            games.append(GameRow(*(_PARSE[name](cells[name]) for name in COLUMNS)))
        except ValueError as e:
            raise ValueError(f"{path}:{line}: not a row of {','.join(COLUMNS)} ({e})") from None
    return games


def _number(name: str, kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"its {name} is not {'an integer' if kind is int else 'a number'}") from None
    return parse


def _boolean(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("its truncated is not 0 or 1")
    return text == "1"


_PARSE: dict[str, Callable[[str], Any]] = {"env_step": _number("env_step", int), "update": _number("update", int),
                                           "score": _number("score", float), "length": _number("length", int),
                                           "truncated": _boolean}


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
