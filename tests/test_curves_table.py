"""`python -m experiments.curves` on run folders made by hand (its `main` in this process: it only reads them): scores on a grid of agent steps,
the table, the plot, and its notes and one-line refusals."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments.curves import main as curves_main
from experiments.curves import score_at
from experiments.run.games_csv import GameRow, GamesCsv
from tests.conftest import refused_in_process
from tests.curves_support import OTHER_MACHINE, assert_plot_drawn, curves_read


def test_score_at_is_the_mean_of_the_last_window_games_ended_by_each_step() -> None:
    games = [GameRow(10, 1, 1.0, 5, False), GameRow(30, 2, 6.0, 5, False), GameRow(20, 1, 2.0, 5, False)]
    scores = score_at(games, np.array([5, 10, 25, 30, 99]), window=2)
    # by 5 no game ended; by 10 only [1]; by 25 [1, 2]; by 30 and later the last two, [2, 6].
    assert math.isnan(scores[0])
    assert scores[1:].tolist() == [1.0, 1.5, 4.0, 4.0]


def test_curves_notes_runs_not_made_on_one_recorded_machine(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def run(name: str, summary: dict) -> None:
        with GamesCsv(tmp_path / name / "games.csv", keep=0) as games:
            games.append([(100, 1, 1.0, 10, False), (200, 2, 3.0, 10, False)])
        (tmp_path / name / "summary.json").write_text(json.dumps({"env_steps": 200, **summary}))

    def curves(*labels: str) -> str:
        result = curves_read(capsys, *[f"--runs={label}={tmp_path / label}" for label in labels],
                         "--grid", "100", "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    run("a", {"machines": [OTHER_MACHINE]})
    run("b", {"machines": [OTHER_MACHINE]})
    run("old", {})  # a summary from before runs recorded their machine
    assert "note:" not in curves("a", "b")  # one machine: seeds pair
    note = curves("a", "old").splitlines()[-2]
    assert note.startswith("note: these runs were not all made on one recorded machine (cpu Some CPU"), note
    assert "(1 run); unrecorded (1 run))" in note


def test_a_run_that_ended_its_schedule_is_read_at_the_schedules_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A 1M schedule in batches of 1,024 ends at 999,424 steps: its last games are its score "at 1M".
    # Here a schedule of 400 steps ended at 384; another run was stopped at 384 on the way.
    for name, ended in (("ended", True), ("stopped", False)):
        run = tmp_path / name / "seed1"
        with GamesCsv(run / "games.csv", keep=0) as games:
            games.append([(100, 1, 1.0, 10, False), (200, 2, 3.0, 10, False), (384, 3, 8.0, 10, False)])
        (run / "summary.json").write_text(json.dumps({"env_steps": 384, "schedule_env_steps": 400, "schedule_ended": ended}))
    ended = curves_read(capsys, "--runs", f"ended={tmp_path / 'ended'}", "--grid", "100", "--window", "2",
                    "--budgets", "400", "--out", str(tmp_path / "out-ended"))
    assert ended.returncode == 0, ended.stderr[-3000:]
    # at 400 the last two games, 3 and 8: 5.5 on its one seed.
    assert "| 400 | **5.5** (1 seed) |" in ended.stdout
    stopped = curves_read(capsys, "--runs", f"stopped={tmp_path / 'stopped'}", "--grid", "100", "--window", "2",
                      "--budgets", "400", "--out", str(tmp_path / "out-stopped"))
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "| 400 | – |" in stopped.stdout  # 384 steps of a longer schedule say nothing about 400


def test_a_run_still_going_is_read_to_its_last_game_not_its_last_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A run's summary.json says `running` with its last checkpoint's steps (200) while its games.csv
    # goes on (to 400): the games after the checkpoint are real, and the curve reaches them.
    run = tmp_path / "going" / "seed1"
    with GamesCsv(run / "games.csv", keep=0) as games:
        games.append([(100, 1, 1.0, 10, False), (200, 2, 3.0, 10, False), (300, 3, 5.0, 10, False), (400, 4, 9.0, 10, False)])
    (run / "summary.json").write_text(json.dumps({"status": "running", "env_steps": 200}))
    result = curves_read(capsys, "--runs", f"going={tmp_path / 'going'}", "--grid", "100", "--window", "2",
                     "--budgets", "200", "400", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # at 200 the last two games, 1 and 3: 2.0; at 400, 5 and 9: 7.0.
    assert "| 200 | **2.0** (1 seed) |" in result.stdout and "| 400 | **7.0** (1 seed) |" in result.stdout


def test_curves_reads_existing_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for seed, scores in ((1, [1.0, 3.0, 5.0]), (2, [2.0, 4.0, 6.0])):
        run = tmp_path / "runs" / f"seed{seed}"
        with GamesCsv(run / "games.csv", keep=0) as games:
            games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
        (run / "summary.json").write_text(json.dumps({"env_steps": 300}))
    result = curves_read(capsys, "--runs", f"mine={tmp_path / 'runs'}", "--grid", "100", "--window", "2",
                     "--budgets", "200", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "out" / "curves.csv").open()))
    # at 200: seed 1 mean(1, 3) = 2, seed 2 mean(2, 4) = 3 → mean 2.5, min 2, max 3; at 300: 4 and 5.
    assert [(r["env_step"], r["mean"], r["min"], r["max"]) for r in rows] == [
        ("100", "1.500", "1.000", "2.000"), ("200", "2.500", "2.000", "3.000"), ("300", "4.500", "4.000", "5.000")]
    assert "| 300 | **4.5** ± 0.5 (4.0 / 5.0) |" in (tmp_path / "out" / "table.md").read_text()
    assert_plot_drawn(tmp_path / "out" / "curves.png")


def test_a_label_still_training_does_not_blank_the_others(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Found reading 3 finished seeds beside a label whose second seed had just started: every row
    # of both labels said "–", since the grid stopped at the shortest run of all.
    for label, seeds in (("done", {1: [1.0, 3.0, 5.0], 2: [2.0, 4.0, 6.0]}), ("going", {1: [7.0, 9.0, 11.0], 2: [8.0]})):
        for seed, scores in seeds.items():
            run = tmp_path / label / f"seed{seed}"
            with GamesCsv(run / "games.csv", keep=0) as games:
                games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
            (run / "summary.json").write_text(json.dumps({"env_steps": 100 * len(scores)}))
    result = curves_read(capsys, "--runs", f"done={tmp_path / 'done'}", "--runs", f"going={tmp_path / 'going'}",
                     "--grid", "100", "--window", "2", "--budgets", "100", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # "going" covers 100 steps on both seeds (7 and 8), so 300 is done's alone: seeds mean(3, 5) = 4 and mean(4, 6) = 5.
    assert "| 100 | **1.5** ± 0.5 (1.0 / 2.0) | **7.5** ± 0.5 (7.0 / 8.0) |" in result.stdout
    assert "| 300 | **4.5** ± 0.5 (4.0 / 5.0) | – |" in result.stdout
    rows = [(r["label"], r["env_step"]) for r in csv.DictReader((tmp_path / "out" / "curves.csv").open())]
    assert rows == [("done", "100"), ("done", "200"), ("done", "300"), ("going", "100")]
    assert_plot_drawn(tmp_path / "out" / "curves.png")


def test_until_cuts_every_label_at_one_number_of_agent_steps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A 1M run beside 500k runs: the longer one's tail would stretch the plot and leave the others a corner of it.
    for label, scores in (("long", [1.0, 3.0, 5.0, 7.0]), ("short", [2.0, 4.0])):
        run = tmp_path / label / "seed1"
        with GamesCsv(run / "games.csv", keep=0) as games:
            games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
        (run / "summary.json").write_text(json.dumps({"env_steps": 100 * len(scores)}))
    result = curves_read(capsys, "--runs", f"long={tmp_path / 'long'}", "--runs", f"short={tmp_path / 'short'}",
                     "--grid", "100", "--window", "2", "--budgets", "200", "400", "--until", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # long at 200: mean(1, 3) = 2; short covers only 200 steps, so its 300 is blank; nothing past 300, 400 included.
    assert "| 200 | **2.0** (1 seed) | **3.0** (1 seed) |" in result.stdout
    assert "| 400 | – | – |" in result.stdout
    rows = [(r["label"], r["env_step"], r["mean"]) for r in csv.DictReader((tmp_path / "out" / "curves.csv").open())]
    assert rows == [("long", "100", "1.000"), ("long", "200", "2.000"), ("long", "300", "4.000"),
                    ("short", "100", "2.000"), ("short", "200", "3.000")]


@pytest.mark.parametrize(("args", "expected"), [
    (["--runs", "nolabel"], "error: --runs nolabel: expected LABEL=DIR"),
    (["--until", "0"], "error: --until 0: expected an integer from 1 to 10_000_000_000_000"),
    (["--runs", "x=/nonexistent/dir"], "error: --runs x=/nonexistent/dir: expected run folders holding games.csv"),
    (["--budget", "2000", "--total-env-steps", "1000"], "error: --budget 2000: expected at most --total-env-steps 1000"),
    (["--jobs", "0"], "error: --jobs 0: expected an integer from 1 to "),
])
def test_curves_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], expected: str,
                                                 tmp_path: Path) -> None:
    # Refused before anything starts, so main(argv) in this process; the real command's exit 2 on a
    # crafted run folder is tests/test_attacks_run_folder.py's.
    assert refused_in_process(capsys, [*args, "--out", str(tmp_path / "out")], main=curves_main).startswith(expected)
    assert not (tmp_path / "out").exists()


def test_two_labels_get_a_two_sided_test_column() -> None:
    # A scores 1, 2, 3 and B 4, 5, 6 at 100 steps: B − A = +3.0 with Welch's interval
    # 3 ± 2.776 · √(2/3) = [+0.7, +5.3] (worked in tests/test_seed_stats.py); at 50 steps A has one
    # seed with a score, so no test there.
    from experiments.curves import Curve, table
    steps = np.array([50, 100])
    a = Curve("A", ("a1", "a2", "a3"), steps, np.array([[1.0, 1.0], [np.nan, 2.0], [np.nan, 3.0]]))
    b = Curve("B", ("b1", "b2", "b3"), steps, np.array([[4.0, 4.0], [5.0, 5.0], [6.0, 6.0]]))
    rows = table([a, b], [50, 100]).splitlines()
    assert rows[0] == "| agent steps | A | B | B − A [95%] |"
    assert rows[2].endswith("| – |")
    assert "| +3.0 [+0.7, +5.3] (Welch t +3.67, df 4.0, p 0.02; permutation p 0.10) |" in rows[3]
    assert "B − A" not in table([a], [100])


def test_a_pbt_population_is_drawn_beside_fixed_seeds_at_equal_agent_steps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # As experiments.pbt lays a population out: <name>/pbt-…/population.json naming the members,
    # whose runs sit beside it as <name>/<run uuid>/ (an exploit leaves each member's own games.csv,
    # counted in its own agent steps, which every member takes in step with the others).
    population = tmp_path / "runs" / "pbt-2" / "pbt-20261126-230000-abcdef"
    (population / "dashboard").mkdir(parents=True)  # the private dashboard's data: no run of the population
    (population / "population.json").write_text(json.dumps({"members": [{"run_uuid": "aa", "seed": 1}, {"run_uuid": "bb", "seed": 2}]}))
    sides = {"pbt": {population.parent / "aa": [2.0, 6.0, 10.0], population.parent / "bb": [4.0, 8.0, 12.0]},
             "fixed": {tmp_path / "fixed" / "seed1": [1.0, 1.0, 3.0], tmp_path / "fixed" / "seed2": [1.0, 3.0, 5.0]}}
    for runs in sides.values():
        for run, scores in runs.items():
            with GamesCsv(run / "games.csv", keep=0) as games:
                games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
            (run / "summary.json").write_text(json.dumps({"env_steps": 300}))
    result = curves_read(capsys, "--runs", f"pbt={population}", "--runs", f"fixed={tmp_path / 'fixed'}",
                     "--grid", "100", "--window", "2", "--budgets", "200", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # At 200 agent steps a run (400 for each side's two): pbt mean(2, 6) = 4 and mean(4, 8) = 6; fixed 1 and 2.
    # At 300: pbt 8 and 10; fixed 2 and 4.
    assert "| 200 | **5.0** ± 1.0 (4.0 / 6.0) | **1.5** ± 0.5 (1.0 / 2.0) |" in result.stdout
    assert "| 300 | **9.0** ± 1.0 (8.0 / 10.0) | **3.0** ± 1.0 (2.0 / 4.0) |" in result.stdout
    rows = [(r["label"], r["env_step"], r["seeds"]) for r in csv.DictReader((tmp_path / "out" / "curves.csv").open())]
    assert rows == [(label, str(step), "2") for label in ("pbt", "fixed") for step in (100, 200, 300)]
    assert_plot_drawn(tmp_path / "out" / "curves.png")
