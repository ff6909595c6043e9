"""Per-update records (updates.csv): written as the run goes, kept consistent across --resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments.run.updates_csv import COLUMNS, METRICS, UpdatesCsv, read_updates


def test_updates_csv_writes_one_row_per_update_and_reads_back_the_same_numbers(tmp_path: Path) -> None:
    path = tmp_path / "updates.csv"
    with UpdatesCsv(path, keep=0) as updates:
        updates.append(1, 256, {"learning_rate": 2.5e-4, "clip_range": 0.1, "value_clip_range": 0.1, "epochs_done": 4,
                                "value_clip_fraction": 0.0, "explained_variance": 1 / 3, "policy_loss": float("nan")})
        updates.append(2, 512, {"learning_rate": 2.4e-4, "clip_range": 0.096, "epochs_done": 4.0})  # no value clip, no score
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and len(lines) == 3
    cells = dict(zip(COLUMNS, lines[1].split(","), strict=True))
    # Whole numbers as integers, other floats in their shortest exact form, a missing metric empty.
    assert (cells["update"], cells["env_step"], cells["epochs_done"], cells["value_clip_fraction"]) == ("1", "256", "4", "0")
    assert (cells["learning_rate"], cells["explained_variance"], cells["policy_loss"]) == ("0.00025", "0.3333333333333333", "nan")
    assert cells["score_mean_100"] == "" and cells["eval_score"] == ""
    first, second = read_updates(path)
    assert first["explained_variance"] == 1 / 3 and math.isnan(first["policy_loss"]) and first["score_mean_100"] is None
    assert (second["update"], second["env_step"], second["clip_range"], second["value_clip_range"]) == (2, 512, 0.096, None)
    assert set(first) == {"update", "env_step", *METRICS}


def test_a_resume_keeps_the_rows_up_to_its_checkpoints_update_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "updates.csv"
    with UpdatesCsv(path, keep=0) as updates:
        for update in (1, 2, 3):
            updates.append(update, 256 * update, {"learning_rate": 1e-3 * update})
    # Resumed from the checkpoint of update 2: update 3 is done again, so its old row goes.
    with UpdatesCsv(path, keep=2) as updates:
        updates.append(3, 768, {"learning_rate": 7e-3})
    assert [(r["update"], r["learning_rate"]) for r in read_updates(path)] == [(1, 1e-3), (2, 2e-3), (3, 7e-3)]
    # A run resumed from a checkpoint older than the file's first row (a run that started writing
    # updates.csv on a later resume) keeps none of them.
    with UpdatesCsv(path, keep=0):
        pass
    assert read_updates(path) == []


@pytest.mark.parametrize(("body", "message"), [
    ("1,256" + "," * len(METRICS) + "\n2,512" + ",x" * len(METRICS) + "\n", r"updates.csv:3: not a row of numbers \(its learning_rate is not a number\)$"),
    ("1.5,256" + "," * len(METRICS) + "\n", r"updates.csv:2: not a row of numbers \(its update is not a whole number\)$"),
    ("1,256\n", r"updates.csv:2: 2 cells, expected 22 \(update,env_step,"),
])
def test_a_malformed_updates_csv_names_the_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "updates.csv"
    path.write_text(",".join(COLUMNS) + "\n" + body)
    with pytest.raises(ValueError, match=message):
        read_updates(path)
    with pytest.raises(ValueError, match=message):
        UpdatesCsv(path, keep=5)
    assert path.read_text() == ",".join(COLUMNS) + "\n" + body  # refused before anything was rewritten


def test_a_file_with_another_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "updates.csv"
    path.write_text("update,env_step,loss\n1,256,0.5\n")
    with pytest.raises(ValueError, match=r"updates.csv: expected the header update,env_step,learning_rate,"):
        read_updates(path)
