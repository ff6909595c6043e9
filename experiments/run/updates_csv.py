"""`updates.csv`: what each update did, one row per completed update, written as it happens.

The dashboard draws these metrics while a run goes; this file keeps them in the run folder, so a
run trained without a dashboard (or on a machine given back since) can still be read: how much of
each batch the clips held back, how the losses and the critic's fit went, the annealed settings
each update used. Like `games.csv` it stays consistent across `--resume`: rows of updates after
the checkpoint a run resumes from are dropped first (the run does those updates again, exactly).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from experiments.run.appended_csv import AppendedCsv, read_rows

# Every metric `Trainer.iteration` returns, in a fixed order; a metric an update did not report
# (`value_clip_range` without a value clip, the score before any game ended, `eval_*` without
# videos) is an empty cell. See README "What each metric means".
METRICS = ("learning_rate", "clip_range", "value_clip_range",
           "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "value_clip_fraction",
           "explained_variance", "epochs_done", "score_mean_100", "game_length_mean_100",
           "sps", "sample_sps", "update_sps", "worker_restarts", "nonfinite_skipped", "eval_score", "eval_length")
COLUMNS = ("update", "env_step", *METRICS)


def read_updates(path: Path) -> list[dict[str, float | None]]:
    """Each row of an updates.csv as {column: number, None where empty}; `ValueError` naming the
    file and line when a cell is not a number, or the file's header is not `COLUMNS`."""
    return [values for _, _, values in _parsed(path)]


def read_update_numbers(path: Path) -> list[int]:
    """The `update` of each row of an updates.csv, checked as `read_updates` checks every cell."""
    return [update for _, update, _ in _parsed(path)]


def _parsed(path: Path) -> list[tuple[list[str], int, dict[str, float | None]]]:
    """(cells, update, values) of each row."""
    parsed = []
    for line, row in read_rows(path, COLUMNS):
        values: dict[str, float | None] = {}
        for name, cell in zip(COLUMNS, row, strict=True):
            try:
                values[name] = float(cell) if cell else None
            except ValueError:  # named, never quoted: see appended_csv.read_rows
                raise ValueError(f"{path}:{line}: not a row of numbers (its {name} is not a number)") from None
        update = values["update"]
        if update is None or not update.is_integer():
            raise ValueError(f"{path}:{line}: its update is not a whole number")
        parsed.append((row, int(update), values))
    return parsed


def _cell(value: float | int | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return str(value)
    number = float(value)
    # Whole numbers as integers (epochs_done, worker_restarts), the rest as the shortest text that
    # reads back as the same float ('nan' and 'inf' included).
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


class UpdatesCsv(AppendedCsv):
    """Appends one row per completed update to `path`. `keep` is the update the run starts from
    (0 for a new run): rows of later updates are removed, since the run does them again."""

    def __init__(self, path: Path, keep: int) -> None:
        kept = [row for row, update, _ in _parsed(path) if update <= keep] if path.exists() else []
        super().__init__(path, COLUMNS, kept)

    def append(self, update: int, env_step: int, metrics: Mapping[str, float | int]) -> None:
        self._append([[str(update), str(env_step), *(_cell(metrics.get(name)) for name in METRICS)]])
