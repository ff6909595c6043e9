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

from experiments.run.appended_csv import AppendedCsv
from experiments.run.folders import read_record

# Every metric `Trainer.iteration` returns, in a fixed order; a metric an update did not report
# (`value_clip_range` without a value clip, the score before any game ended, `eval_*` without
# videos) is an empty cell. See README "What each metric means".
METRICS = ("learning_rate", "clip_range", "value_clip_range",
           "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "value_clip_fraction",
           "explained_variance", "epochs_done", "score_mean_100", "game_length_mean_100",
           "sps", "sample_sps", "update_sps", "worker_restarts", "nonfinite_skipped", "eval_score", "eval_length")
CELLS = {"update": "whole", "env_step": "float?", **dict.fromkeys(METRICS, "float?")}
COLUMNS = tuple(CELLS)
ROW = "a row of numbers"  # what a refusal says each row must be


def read_updates(path: Path) -> list[dict[str, float | None]]:
    """Each row of an updates.csv as {column: number, None where empty} (`read_record`); `ValueError`
    naming the file and line when a cell is not a number, or the file's header is not `COLUMNS`."""
    return [dict(zip(COLUMNS, values, strict=True)) for _, _, values in read_record(path, CELLS, ROW).rows]


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
        kept = [cells for _, cells, values in read_record(path, CELLS, ROW).rows if values[0] <= keep] if path.exists() else []
        super().__init__(path, COLUMNS, kept)

    def append(self, update: int, env_step: int, metrics: Mapping[str, float | int]) -> None:
        self._append([[str(update), str(env_step), *(_cell(metrics.get(name)) for name in METRICS)]])
