"""Per-game records (games.csv) and the learning-curve command, through the real CLI; the resume test covers updates.csv too."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.curves import score_at
from experiments.run.appended_csv import torn_last_line
from experiments.run.games_csv import COLUMNS, GameRow, GamesCsv, read_games
from experiments.run.updates_csv import read_updates
from experiments.seed_runs import stopping_signal
from ppo.checkpoint import load_checkpoint, save_checkpoint
from tests import process_table
from tests.conftest import run_once, wait_for_file

TINY_RUN = ["--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "128", "--minibatches", "2", "--epochs", "1"]
# 2 games × 64 steps = 128 agent steps per update; a schedule of 1,050 steps is 8 updates, ending at 1,024.
EIGHT_UPDATES = ("--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "64", "--minibatches", "2", "--epochs", "1",
                 "--total-env-steps", "1050")
# Its first half, stopped at its fourth checkpoint: made once (`run_once`) for the resume that
# completes it and for the resumes that record another machine.
FIRST_HALF = (*EIGHT_UPDATES, "--stop-after-env-steps", "512")


def summary_of(stdout: str) -> dict:
    return json.loads(Path(stdout.strip().splitlines()[-1]).read_text())


def test_score_at_is_the_mean_of_the_last_window_games_ended_by_each_step() -> None:
    games = [GameRow(10, 1, 1.0, 5, False), GameRow(30, 2, 6.0, 5, False), GameRow(20, 1, 2.0, 5, False)]
    scores = score_at(games, np.array([5, 10, 25, 30, 99]), window=2)
    # by 5 no game ended; by 10 only [1]; by 25 [1, 2]; by 30 and later the last two, [2, 6].
    assert math.isnan(scores[0])
    assert scores[1:].tolist() == [1.0, 1.5, 4.0, 4.0]


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
    score could be cut ('7' of '70'), and a resume drops it or refuses (tests/test_run_safety.py)."""
    path = tmp_path / "games.csv"
    with GamesCsv(path, keep=0) as games:
        games.append([(100, 1, 3.0, 50, False), (180, 2, 1.5, 70, True)])
    with path.open("a", newline="") as f:
        f.write(tail)
    assert read_games(path) == [GameRow(100, 1, 3.0, 50, False), GameRow(180, 2, 1.5, 70, True)]
    assert torn_last_line(path.read_bytes()) == 4  # header, two rows, then the cut line
    with GamesCsv(path, keep=2) as games:  # a resume from the checkpoint after 2 games
        games.append([(250, 3, 7.0, 90, False)])
    assert path.read_bytes().endswith(b"250,3,7,90,0\r\n")
    assert read_games(path) == [GameRow(100, 1, 3.0, 50, False), GameRow(180, 2, 1.5, 70, True), GameRow(250, 3, 7.0, 90, False)]
    assert torn_last_line(path.read_bytes()) is None


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


OTHER_MACHINE = {"cpu": "Some CPU (cpu family 6, model 143, stepping 8)", "cpu_capability": "AVX512", "device": "cpu",
                 "torch": "2.13.0+cpu", "numpy": "2.4.6", "ale_py": "0.12.1"}


@pytest.mark.slow
@pytest.mark.parametrize(("record", "expected_first", "warning"), [
    ([OTHER_MACHINE], OTHER_MACHINE, None),  # trained there, resumed here
    ([{"cpu": ["not", "a", "string"]}], {"cpu": "unrecorded (trained before runs recorded their machine)"},
     "warning: ignoring the checkpoint's machines = [{'cpu': ['not', 'a', 'string']}]: expected a list of at most 64 "
     "records of strings (of 200 characters at most)"),
])
def test_a_run_resumed_on_another_machine_records_both_and_curves_says_so(
        cli, tmp_path: Path, record: list, expected_first: dict, warning: str | None) -> None:
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

    curves = cli.run("experiments.curves", "--runs", f"mixed={tmp_path / 'runs'}", "--grid", "256", "--window", "1",
                     "--out", str(tmp_path / "out"))
    assert curves.returncode == 0, curves.stderr[-3000:]
    assert "note: these runs were not all made on one recorded machine (" in curves.stdout
    assert f"cpu {expected_first['cpu']}" in curves.stdout and f"cpu {part['machines'][0]['cpu']}" in curves.stdout
    assert "note:" in (tmp_path / "out" / "table.md").read_text()
    assert cli.leftovers() == []


def test_curves_notes_runs_not_made_on_one_recorded_machine(cli, tmp_path: Path) -> None:
    def run(name: str, summary: dict) -> None:
        with GamesCsv(tmp_path / name / "games.csv", keep=0) as games:
            games.append([(100, 1, 1.0, 10, False), (200, 2, 3.0, 10, False)])
        (tmp_path / name / "summary.json").write_text(json.dumps({"env_steps": 200, **summary}))

    def curves(*labels: str) -> str:
        result = cli.run("experiments.curves", *[f"--runs={label}={tmp_path / label}" for label in labels],
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


@pytest.mark.slow
def test_curves_trains_seeds_and_draws_them(cli, tmp_path: Path) -> None:
    out = tmp_path / "curves"
    result = cli.run("experiments.curves", "--seeds", "1", "2", "--total-env-steps", "1024", "--budget", "768", "--grid", "128",
                     "--window", "5", "--budgets", "512", "768", "--out", str(out), *TINY_RUN)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((out / "curves.csv").open()))
    assert {r["label"] for r in rows} == {"project"}
    assert [int(r["env_step"]) for r in rows] == sorted(int(r["env_step"]) for r in rows)
    assert all(float(r["min"]) <= float(r["mean"]) <= float(r["max"]) for r in rows)
    assert max(int(r["seeds"]) for r in rows) == 2 and int(rows[-1]["env_step"]) == 768
    table = (out / "table.md").read_text()
    assert "| 512 |" in table and "| 768 |" in table and result.stdout.startswith("curves: project seed 1")
    assert_plot_drawn(out / "curves.png")
    assert cli.leftovers() == []


def assert_plot_drawn(path: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[..., :3]
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    # matplotlib's first line colour (tab:blue, #1f77b4) must be there: the curve, not just axes.
    blue = np.abs(pixels - np.array([0x1F, 0x77, 0xB4]) / 255).max(-1) < 0.02
    assert blue.sum() > 100


def test_a_run_that_ended_its_schedule_is_read_at_the_schedules_end(cli, tmp_path: Path) -> None:
    # A 1M schedule in batches of 1,024 ends at 999,424 steps: its last games are its score "at 1M".
    # Here a schedule of 400 steps ended at 384; another run was stopped at 384 on the way.
    for name, ended in (("ended", True), ("stopped", False)):
        run = tmp_path / name / "seed1"
        with GamesCsv(run / "games.csv", keep=0) as games:
            games.append([(100, 1, 1.0, 10, False), (200, 2, 3.0, 10, False), (384, 3, 8.0, 10, False)])
        (run / "summary.json").write_text(json.dumps({"env_steps": 384, "schedule_env_steps": 400, "schedule_ended": ended}))
    ended = cli.run("experiments.curves", "--runs", f"ended={tmp_path / 'ended'}", "--grid", "100", "--window", "2",
                    "--budgets", "400", "--out", str(tmp_path / "out-ended"))
    assert ended.returncode == 0, ended.stderr[-3000:]
    # at 400 the last two games, 3 and 8: 5.5 on its one seed.
    assert "| 400 | **5.5** (1 seed) |" in ended.stdout
    stopped = cli.run("experiments.curves", "--runs", f"stopped={tmp_path / 'stopped'}", "--grid", "100", "--window", "2",
                      "--budgets", "400", "--out", str(tmp_path / "out-stopped"))
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "| 400 | – |" in stopped.stdout  # 384 steps of a longer schedule say nothing about 400


def test_a_run_still_going_is_read_to_its_last_game_not_its_last_checkpoint(cli, tmp_path: Path) -> None:
    # A run's summary.json says `running` with its last checkpoint's steps (200) while its games.csv
    # goes on (to 400): the games after the checkpoint are real, and the curve reaches them.
    run = tmp_path / "going" / "seed1"
    with GamesCsv(run / "games.csv", keep=0) as games:
        games.append([(100, 1, 1.0, 10, False), (200, 2, 3.0, 10, False), (300, 3, 5.0, 10, False), (400, 4, 9.0, 10, False)])
    (run / "summary.json").write_text(json.dumps({"status": "running", "env_steps": 200}))
    result = cli.run("experiments.curves", "--runs", f"going={tmp_path / 'going'}", "--grid", "100", "--window", "2",
                     "--budgets", "200", "400", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # at 200 the last two games, 1 and 3: 2.0; at 400, 5 and 9: 7.0.
    assert "| 200 | **2.0** (1 seed) |" in result.stdout and "| 400 | **7.0** (1 seed) |" in result.stdout


def test_curves_reads_existing_runs(cli, tmp_path: Path) -> None:
    for seed, scores in ((1, [1.0, 3.0, 5.0]), (2, [2.0, 4.0, 6.0])):
        run = tmp_path / "runs" / f"seed{seed}"
        with GamesCsv(run / "games.csv", keep=0) as games:
            games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
        (run / "summary.json").write_text(json.dumps({"env_steps": 300}))
    result = cli.run("experiments.curves", "--runs", f"mine={tmp_path / 'runs'}", "--grid", "100", "--window", "2",
                     "--budgets", "200", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "out" / "curves.csv").open()))
    # at 200: seed 1 mean(1, 3) = 2, seed 2 mean(2, 4) = 3 → mean 2.5, min 2, max 3; at 300: 4 and 5.
    assert [(r["env_step"], r["mean"], r["min"], r["max"]) for r in rows] == [
        ("100", "1.500", "1.000", "2.000"), ("200", "2.500", "2.000", "3.000"), ("300", "4.500", "4.000", "5.000")]
    assert "| 300 | **4.5** ± 0.5 (4.0 / 5.0) |" in (tmp_path / "out" / "table.md").read_text()
    assert_plot_drawn(tmp_path / "out" / "curves.png")


def test_a_label_still_training_does_not_blank_the_others(cli, tmp_path: Path) -> None:
    # Found reading 3 finished seeds beside a label whose second seed had just started: every row
    # of both labels said "–", since the grid stopped at the shortest run of all.
    for label, seeds in (("done", {1: [1.0, 3.0, 5.0], 2: [2.0, 4.0, 6.0]}), ("going", {1: [7.0, 9.0, 11.0], 2: [8.0]})):
        for seed, scores in seeds.items():
            run = tmp_path / label / f"seed{seed}"
            with GamesCsv(run / "games.csv", keep=0) as games:
                games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
            (run / "summary.json").write_text(json.dumps({"env_steps": 100 * len(scores)}))
    result = cli.run("experiments.curves", "--runs", f"done={tmp_path / 'done'}", "--runs", f"going={tmp_path / 'going'}",
                     "--grid", "100", "--window", "2", "--budgets", "100", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # "going" covers 100 steps on both seeds (7 and 8), so 300 is done's alone: seeds mean(3, 5) = 4 and mean(4, 6) = 5.
    assert "| 100 | **1.5** ± 0.5 (1.0 / 2.0) | **7.5** ± 0.5 (7.0 / 8.0) |" in result.stdout
    assert "| 300 | **4.5** ± 0.5 (4.0 / 5.0) | – |" in result.stdout
    rows = [(r["label"], r["env_step"]) for r in csv.DictReader((tmp_path / "out" / "curves.csv").open())]
    assert rows == [("done", "100"), ("done", "200"), ("done", "300"), ("going", "100")]
    assert_plot_drawn(tmp_path / "out" / "curves.png")


def test_until_cuts_every_label_at_one_number_of_agent_steps(cli, tmp_path: Path) -> None:
    # A 1M run beside 500k runs: the longer one's tail would stretch the plot and leave the others a corner of it.
    for label, scores in (("long", [1.0, 3.0, 5.0, 7.0]), ("short", [2.0, 4.0])):
        run = tmp_path / label / "seed1"
        with GamesCsv(run / "games.csv", keep=0) as games:
            games.append([(100 * (i + 1), i + 1, s, 10, False) for i, s in enumerate(scores)])
        (run / "summary.json").write_text(json.dumps({"env_steps": 100 * len(scores)}))
    result = cli.run("experiments.curves", "--runs", f"long={tmp_path / 'long'}", "--runs", f"short={tmp_path / 'short'}",
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
def test_curves_bad_input_is_one_line_and_exit_2(cli, args: list[str], expected: str, tmp_path: Path) -> None:
    result = cli.run("experiments.curves", *args, "--out", str(tmp_path / "out"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(expected), result.stderr


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason='the peer needs pip install -e ".[compare]"')
def test_the_sb3_peer_writes_full_game_records(cli, tmp_path: Path) -> None:
    result = cli.run("experiments.peer_sb3", "--seed", "1", "--total-env-steps", "2048", "--stop-after-env-steps", "1024",
                     "--run-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    games = read_games(tmp_path / "games.csv")
    assert games and all(g.env_step <= 1024 + 8 for g in games)
    # Full games: a random policy's whole game lasts well over one life (5 lives in Breakout).
    assert np.mean([g.length for g in games]) > 100
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] >= 1024 and summary["status"] == "completed"
    [machine] = summary["machines"]  # SB3 too repeats a seed on one machine only
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and machine["device"] == "cpu"
    assert cli.leftovers() == []


# TINY_RUN's games in updates of 2 × 16 steps: a run checkpoints, and stops at a signal, after a
# short update.
SHORT_UPDATES = ["--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "16", "--minibatches", "2", "--epochs", "1"]


def _start_two_seeds_at_once(cli, out: Path, *curve_options: str, run: list[str] = SHORT_UPDATES):
    """curves --jobs 2 on two seeds whose budget they cannot reach in a test; returned once both
    runs have checkpointed, which only two runs going at once can do (with one job at a time the
    second would wait for the first, which does not end)."""
    process = cli.start("experiments.curves", "--jobs", "2", "--seeds", "1", "2", "--total-env-steps", "1000000", "--budget", "1000000",
                        "--out", str(out), *curve_options, *run, "--checkpoint-every", "1")
    for seed in (1, 2):
        deadline = time.monotonic() + 600
        while not list((out / "runs" / "project" / f"seed{seed}").glob("project/*/checkpoints/checkpoint.pt")):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"seed {seed} never checkpointed"
            time.sleep(0.05)
    return process


def _statuses(out: Path) -> list[str]:
    return [json.loads(p.read_text())["status"] for p in sorted(out.glob("runs/project/seed*/project/*/summary.json"))]


@pytest.mark.slow
def test_curves_passes_a_sigterm_to_every_run_and_leaves_none_behind(cli, tmp_path: Path) -> None:
    process = _start_two_seeds_at_once(cli, tmp_path / "out")
    process.send_signal(signal.SIGTERM)  # to curves alone: its runs are in sessions of their own
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("curves: stopped by SIGTERM; each run stopped at a checkpoint"), stderr
    assert _statuses(tmp_path / "out") == ["interrupted", "interrupted"]  # each stopped at an update, checkpointed
    assert cli.leftovers() == []


def _run_of_seed(curves_pid: int, seed: int) -> int:
    """The pid of curves' run of `seed`, which is also its process group (each run has a session)."""
    for pid in process_table.children(curves_pid):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"--seed" in argv and argv[argv.index(b"--seed") + 1] == str(seed).encode():
            return pid
    raise AssertionError(f"curves (pid {curves_pid}) has no run of seed {seed}")


def test_a_runs_exit_status_says_whether_a_stop_request_ended_it() -> None:
    # 128 + n: the run stopped at a checkpoint on signal n; -n: signal n ended it before any handler.
    assert [stopping_signal(code) for code in (130, 143, -2, -15)] == ["SIGINT", "SIGTERM", "SIGINT", "SIGTERM"]
    assert [stopping_signal(code) for code in (0, 1, 2, 137, -9, 129)] == [None] * 6  # ended, faults, SIGKILL, SIGHUP


@pytest.mark.slow
def test_a_run_stopped_alone_ends_its_curve_and_the_others_go_on(cli, tmp_path: Path) -> None:
    # The user stops one seed's run (its whole process group), not curves: that is not a failure.
    out = tmp_path / "out"
    # Updates of 256 steps: the runs play to a game's end with a checkpoint every few hundred steps.
    process = _start_two_seeds_at_once(cli, out, "--grid", "128", "--window", "5", "--budgets", "256", run=TINY_RUN)
    first, second = _run_of_seed(process.pid, 1), _run_of_seed(process.pid, 2)
    _wait_for_a_game(out, 1, process)
    os.killpg(first, signal.SIGTERM)
    line = ""
    while "seed 1 was stopped" not in line:
        line = process.stderr.readline()
        assert line, f"curves ended (exit {process.wait()}) without going on: {process.communicate()[1][-3000:]}"
    assert line.strip() == ("curves: project seed 1 was stopped by SIGTERM sent to it alone; its label's curve ends where it "
                            "stopped (the other runs go on)")
    assert process.poll() is None and process_table.is_alive(second)  # neither curves nor seed 2 was stopped with it
    _wait_for_a_game(out, 2, process)
    os.killpg(second, signal.SIGTERM)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    assert _statuses(out) == ["interrupted", "interrupted"]  # each at a checkpoint, resumable
    table = (out / "table.md").read_text()
    assert table.count("sent to it alone; its label's curve ends where it stopped.") == 2, table
    stopped_at = [json.loads(p.read_text())["env_steps"] for p in sorted(out.glob("runs/project/seed*/project/*/summary.json"))]
    rows = list(csv.DictReader((out / "curves.csv").open()))
    assert rows and {r["label"] for r in rows} == {"project"} and {int(r["seeds"]) for r in rows} == {2}
    assert int(rows[-1]["env_step"]) <= min(stopped_at)  # the label's curve ends where its first run stopped
    assert cli.leftovers() == []


def _wait_for_a_game(out: Path, seed: int, process, timeout_s: float = 600) -> None:
    """Until the run of `seed` under curves' `out` has recorded a finished game."""
    deadline = time.monotonic() + timeout_s
    # Whole lines only (the header and one row): the run may be writing the next one as this reads.
    while not any(p.read_text().count("\n") >= 2 for p in out.glob(f"runs/project/seed{seed}/project/*/games.csv")):
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"seed {seed} finished no game in {timeout_s} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_runs_end_with_a_killed_curves(cli, tmp_path: Path) -> None:
    # SIGKILL cannot be passed on: each run asked the kernel for a SIGTERM when its parent dies.
    process = _start_two_seeds_at_once(cli, tmp_path / "out")
    process.kill()
    process.communicate(timeout=60)
    assert cli.leftovers() == []
    assert _statuses(tmp_path / "out") == ["interrupted", "interrupted"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason='the peer needs pip install -e ".[compare]"')
def test_a_peer_run_names_its_machine_before_it_ends(cli, tmp_path: Path) -> None:
    # Killed before its end (kill -9, a machine taken back), the peer's run must still say where it ran.
    process = cli.start("experiments.peer_sb3", "--seed", "1", "--total-env-steps", "1000000", "--run-dir", str(tmp_path))
    wait_for_file(tmp_path / "summary.json", process)
    process.kill()
    process.communicate(timeout=60)
    assert cli.leftovers() == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["status"], summary["seed"], summary["env_steps"], summary["total_env_steps"]) == ("running", 1, 0, 1_000_000)
    [machine] = summary["machines"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason='the peer needs pip install -e ".[compare]"')
def test_a_peer_run_stops_at_a_sigterm_with_its_games_and_summary(cli, tmp_path: Path) -> None:
    # Like the project's runs: it ends at its next step, says so, and exits 128 + 15 (curves reads that as a stop).
    process = cli.start("experiments.peer_sb3", "--seed", "1", "--total-env-steps", "1000000", "--run-dir", str(tmp_path))
    wait_for_file(tmp_path / "summary.json", process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 8 <= summary["env_steps"] < 1_000_000  # 8 games: one step is 8 agent steps
    assert all(g.env_step <= summary["env_steps"] for g in read_games(tmp_path / "games.csv"))
    assert cli.leftovers() == []


def test_a_peer_run_among_others_gets_its_share_of_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from configs.grouping import usable_cores
    from experiments.seed_runs import seed_run

    monkeypatch.delenv("OMP_WAIT_POLICY")  # as in a user's shell (the suite sets it, tests/__init__.py)
    args = argparse.Namespace(out=str(tmp_path), total_env_steps=1000, budget=500, jobs=1)
    alone = seed_run("sb3", 3, args, [])
    assert alone.environment == () and alone.out == tmp_path / "runs" / "sb3" / "seed3"
    assert alone.command[-6:] == ("--total-env-steps", "1000", "--stop-after-env-steps", "500", "--run-dir", str(alone.out))
    assert seed_run("project", 3, args, []).environment == ()  # a run alone keeps torch's defaults
    cores = usable_cores()
    args.jobs = 2  # runs at once: idle threads sleep rather than spin on the cores they share
    assert seed_run("sb3", 3, args, []).environment == (("OMP_NUM_THREADS", str(max(1, cores // 2))), ("OMP_WAIT_POLICY", "PASSIVE"))
    args.jobs = cores + 1  # more runs than cores: one thread each, never zero
    assert seed_run("sb3", 3, args, []).environment == (("OMP_NUM_THREADS", "1"), ("OMP_WAIT_POLICY", "PASSIVE"))
    # The project's runs take their threads from their own options (--torch-threads), passed on as given.
    assert seed_run("project", 3, args, ["--torch-threads", "1"]).environment == (("OMP_WAIT_POLICY", "PASSIVE"),)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's own choice wins
    assert seed_run("project", 3, args, []).environment == (("OMP_WAIT_POLICY", "ACTIVE"),)


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


def test_a_pbt_population_is_drawn_beside_fixed_seeds_at_equal_agent_steps(cli, tmp_path: Path) -> None:
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
    result = cli.run("experiments.curves", "--runs", f"pbt={population}", "--runs", f"fixed={tmp_path / 'fixed'}",
                     "--grid", "100", "--window", "2", "--budgets", "200", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # At 200 agent steps a run (400 for each side's two): pbt mean(2, 6) = 4 and mean(4, 8) = 6; fixed 1 and 2.
    # At 300: pbt 8 and 10; fixed 2 and 4.
    assert "| 200 | **5.0** ± 1.0 (4.0 / 6.0) | **1.5** ± 0.5 (1.0 / 2.0) |" in result.stdout
    assert "| 300 | **9.0** ± 1.0 (8.0 / 10.0) | **3.0** ± 1.0 (2.0 / 4.0) |" in result.stdout
    rows = [(r["label"], r["env_step"], r["seeds"]) for r in csv.DictReader((tmp_path / "out" / "curves.csv").open())]
    assert rows == [(label, str(step), "2") for label in ("pbt", "fixed") for step in (100, 200, 300)]
    assert_plot_drawn(tmp_path / "out" / "curves.png")
