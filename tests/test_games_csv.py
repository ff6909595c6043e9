"""Per-game records (games.csv) and updates.csv as a run writes them, through the real CLI: kept to
the checkpoint on a resume, read back exactly, and the machines a run was trained on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experiments.run.folders import read_record
from experiments.run.games_csv import CELLS, COLUMNS, ROW, GameRow, GamesCsv, read_games
from experiments.run.updates_csv import read_updates
from ppo.checkpoint import load_checkpoint, save_checkpoint
from tests.conftest import run_once
from tests.curves_support import OTHER_MACHINE, curves_read
from tests.test_experiment import summary_of

# 2 games × 64 steps = 128 agent steps per update; a schedule of 1,050 steps is 8 updates, ending at 1,024.
EIGHT_UPDATES = ("--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "64", "--minibatches", "2", "--epochs", "1",
                 "--total-env-steps", "1050")
# Its first half, stopped at its fourth checkpoint: made once (`run_once`) for the resume that
# completes it and for the resumes that record another machine.
FIRST_HALF = (*EIGHT_UPDATES, "--stop-after-env-steps", "512")


def test_games_csv_keeps_only_the_checkpoints_games_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "games.csv"
    with GamesCsv(path, keep=0) as games:
        games.append([(100, 1, 3.0, 50, False), (180, 2, 1.5, 70, True), (260, 3, 7.0, 90, False)])
    assert path.read_text().splitlines() == [",".join(COLUMNS), "100,1,3,50,0", "180,2,1.5,70,1", "260,3,7,90,0"]
    # A resume from a checkpoint taken after 2 games: the third is played again, so it goes.
    with GamesCsv(path, keep=2) as games:
        games.append([(250, 3, 7.0, 90, False)])
    assert read_games(path) == [GameRow(100, 1, 3.0, 50, False), GameRow(180, 2, 1.5, 70, True), GameRow(250, 3, 7.0, 90, False)]


def test_a_malformed_games_csv_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "games.csv"
    path.write_text(",".join(COLUMNS) + "\n100,1,3,50,0\n100,1,three,50,0\n")
    # The cell is named, never quoted: a run folder may hold a file (or a link) from elsewhere.
    with pytest.raises(ValueError, match=r"games.csv:3: not a row of env_step,update,score,length,truncated \(its score is not a number\)$"):
        read_games(path)


@pytest.mark.parametrize("tail", ["260,3,7", "260,3,7,90,0", "260,3,7,90,0\r"])
def test_a_last_line_cut_short_is_not_a_row(tmp_path: Path, tail: str) -> None:
    """An append the run's end cut short leaves a last line without its line end. However much of
    the row it holds (a cut cell, every cell, all but the '\n'), it is not read as a row: its
    score could be cut ('7' of '70'), and a resume drops it or refuses (tests/test_run_safety_records.py)."""
    path = tmp_path / "games.csv"
    with GamesCsv(path, keep=0) as games:
        games.append([(100, 1, 3.0, 50, False), (180, 2, 1.5, 70, True)])
    with path.open("a", newline="") as f:
        f.write(tail)
    assert read_games(path) == [GameRow(100, 1, 3.0, 50, False), GameRow(180, 2, 1.5, 70, True)]
    assert read_record(path, CELLS, ROW).torn_line == 4  # header, two rows, then the cut line
    with GamesCsv(path, keep=2) as games:  # a resume from the checkpoint after 2 games
        games.append([(250, 3, 7.0, 90, False)])
    assert path.read_bytes().endswith(b"250,3,7,90,0\r\n")
    assert read_games(path) == [GameRow(100, 1, 3.0, 50, False), GameRow(180, 2, 1.5, 70, True), GameRow(250, 3, 7.0, 90, False)]
    assert read_record(path, CELLS, ROW).torn_line is None


@pytest.mark.slow
def test_a_resumed_run_writes_the_same_games_csv_as_an_uninterrupted_one(cli, tmp_path: Path) -> None:
    whole = cli.run("experiments.breakout", *EIGHT_UPDATES, "--data-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr[-3000:]
    part = run_once(cli, tmp_path / "parts", *FIRST_HALF)
    assert (part["updates"], part["env_steps"], part["schedule_env_steps"], part["schedule_ended"]) == (4, 512, 1050, False)
    rest = cli.run("experiments.breakout", "--resume", part["run_uuid"], "--stop-after-env-steps", "none", "--data-dir", str(tmp_path / "parts"))
    assert rest.returncode == 0, rest.stderr[-3000:]
    ended = summary_of(rest.stdout)
    assert (ended["updates"], ended["env_steps"], ended["schedule_env_steps"], ended["schedule_ended"]) == (8, 1024, 1050, True)

    expected = read_games(Path(summary_of(whole.stdout)["run_dir"]) / "games.csv")
    resumed = read_games(Path(part["run_dir"]) / "games.csv")
    assert len(expected) == summary_of(whole.stdout)["games"] > 0
    # Games ended on both sides of the resume (after 512 steps), so both legs' rows are compared.
    assert min(g.env_step for g in expected) <= 512 < max(g.env_step for g in expected)
    assert resumed == expected  # exact resume: no duplicate, no gap, same rows
    assert [g.env_step for g in expected] == sorted(g.env_step for g in expected)

    # updates.csv too: one row per update, the same numbers but the wall-clock rates.
    def deterministic(run_dir: str) -> list[dict]:
        return [{k: v for k, v in row.items() if not k.endswith("sps")} for row in read_updates(Path(run_dir) / "updates.csv")]
    whole_updates = deterministic(summary_of(whole.stdout)["run_dir"])
    assert deterministic(part["run_dir"]) == whole_updates
    assert [(u["update"], u["env_step"]) for u in whole_updates] == [(k, 128 * k) for k in range(1, 9)]
    # Update k of 8 anneals from the update before it: 2.5e-4 and 0.1 × (1 − (k − 1)/8); the value
    # clip is the defaults' fixed 0.5, never annealed.
    assert [u["learning_rate"] for u in whole_updates] == pytest.approx([2.5e-4 * (9 - k) / 8 for k in range(1, 9)])
    assert [u["clip_range"] for u in whole_updates] == pytest.approx([0.1 * (9 - k) / 8 for k in range(1, 9)])
    assert [u["value_clip_range"] for u in whole_updates] == [0.5] * 8
    assert all(0 <= u["value_clip_fraction"] <= 1 and u["epochs_done"] == 1 for u in whole_updates)
    assert cli.leftovers() == []
    # Both legs ran on this machine: one record, naming the kernels torch chose here.
    assert ended["machines"] == part["machines"] == summary_of(whole.stdout)["machines"]
    [machine] = ended["machines"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and machine["torch"] == torch.__version__


@pytest.mark.slow
@pytest.mark.parametrize(("record", "expected_first", "warning"), [
    ([OTHER_MACHINE], OTHER_MACHINE, None),  # trained there, resumed here
    ([{"cpu": ["not", "a", "string"]}], {"cpu": "unrecorded (trained before runs recorded their machine)"},
     "warning: ignoring the checkpoint's machines = [{'cpu': ['not', 'a', 'string']}]: expected a list of at most 64 "
     "records of strings (of 200 characters at most)"),
])
def test_a_run_resumed_on_another_machine_records_both_and_curves_says_so(
        cli, capsys: pytest.CaptureFixture[str], tmp_path: Path, record: list, expected_first: dict, warning: str | None) -> None:
    part = run_once(cli, tmp_path / "runs", *FIRST_HALF)  # 4 updates, 512 agent steps
    checkpoint = Path(part["checkpoint"])
    state = load_checkpoint(checkpoint)
    state["machines"] = record  # a real checkpoint file, as another machine (or a crafted file) left it
    save_checkpoint(checkpoint, state)
    rest = cli.run("experiments.breakout", "--resume", part["run_uuid"], "--stop-after-env-steps", "640",
                   "--data-dir", str(tmp_path / "runs"))
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert (warning in rest.stderr) if warning else "warning" not in rest.stderr
    ended = summary_of(rest.stdout)
    assert ended["machines"] == [expected_first, *part["machines"]] and ended["updates"] == 5
    assert load_checkpoint(Path(ended["checkpoint"]))["machines"] == ended["machines"]
    assert cli.leftovers() == []
    if warning:  # what curves says of two records is the same for any two (curves.machines_note): read once
        return

    curves = curves_read(capsys, "--runs", f"mixed={tmp_path / 'runs'}", "--grid", "256", "--window", "1",
                         "--out", str(tmp_path / "out"))
    assert curves.returncode == 0, curves.stderr[-3000:]
    assert "note: these runs were not all made on one recorded machine (" in curves.stdout
    assert f"cpu {expected_first['cpu']}" in curves.stdout and f"cpu {part['machines'][0]['cpu']}" in curves.stdout
    assert "note:" in (tmp_path / "out" / "table.md").read_text()
    assert cli.leftovers() == []
