"""`python -m experiments.curves` training seeds itself: the runs it starts and stops (a SIGTERM to
it, to one run alone, a SIGKILL) and draws, and the SB3 peer's runs beside them. Seeds trained to
their end and drawn are tests/dashboard/test_compare.py's (the same run sends them to a dashboard)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.run.games_csv import read_games
from experiments.seed_runs import stopping_signal
from tests import process_table
from tests.conftest import wait_for_file

TINY_RUN = ["--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "128", "--minibatches", "2", "--epochs", "1"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason='the peer needs pip install -e ".[compare]"')
def test_the_sb3_peer_writes_full_game_records(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3-log"))  # where SB3's default logger would make its folder
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
    assert not (tmp_path / "sb3-log").exists()  # nothing left outside the run's folder
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
def test_a_peer_run_names_its_machine_from_its_start_and_stops_at_a_sigterm(cli, tmp_path: Path) -> None:
    process = cli.start("experiments.peer_sb3", "--seed", "1", "--total-env-steps", "1000000", "--run-dir", str(tmp_path))
    wait_for_file(tmp_path / "summary.json", process)
    # Killed before its end (kill -9, a machine taken back), the peer's run must still say where it
    # ran: what a SIGKILL would leave is the summary on disk now, written (atomically) at its start.
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["status"], summary["seed"], summary["env_steps"], summary["total_env_steps"]) == ("running", 1, 0, 1_000_000)
    [machine] = summary["machines"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()

    # Like the project's runs: it ends at its next step, says so, and exits 128 + 15 (curves reads that as a stop).
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 8 <= summary["env_steps"] < 1_000_000  # 8 games: one step is 8 agent steps
    assert summary["machines"] == [machine]
    assert all(g.env_step <= summary["env_steps"] for g in read_games(tmp_path / "games.csv"))
    assert cli.leftovers() == []


def test_a_peer_run_among_others_gets_its_share_of_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from configs.machine import usable_cores
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
