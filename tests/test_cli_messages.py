"""What the commands say where a user could be left guessing: a refused batch described as this
machine would group it, and `curves` on a label too short to draw or a single seed. Through the
real commands, on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from configs.machine import usable_cores
from experiments.run.games_csv import GamesCsv
from tests.conftest import REPO


def run(*args: str, cores: int | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m ARGS`, on its first `cores` usable cores only (as `taskset` would), or on all."""
    def pin() -> None:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          preexec_fn=pin if cores is not None else None)


def grouped_by_hand(cores: int) -> tuple[int, int]:
    """(processes, games in each) for the 8 default games, as docs/training.md lists them:
    1 core → 1 × 8, 2–3 → 2 × 4, 4–7 → 4 × 2, 8 or more → 8 × 1."""
    return (1, 8) if cores == 1 else (2, 4) if cores < 4 else (4, 2) if cores < 8 else (8, 1)


BATCH = "error: --minibatches 3: expected a divisor of the batch size 1024 (n_workers {} × envs_per_worker {} × worker_steps 128)\n"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux's CPU affinity")
@pytest.mark.parametrize("cores", [None, 1])
def test_a_refused_batch_is_described_as_this_machine_would_group_it(cores: int | None) -> None:
    result = run("experiments.breakout", "--minibatches", "3", cores=cores)
    workers, envs = grouped_by_hand(usable_cores() if cores is None else 1)
    assert result.returncode == 2 and result.stderr == BATCH.format(workers, envs), result.stderr


@pytest.mark.parametrize("chosen", [["--n-workers", "8"], ["--envs-per-worker", "1"], ["--backend", "ray"]])
def test_a_grouping_chosen_on_the_command_line_or_on_ray_is_described_as_chosen(chosen: list[str]) -> None:
    # Chosen by hand, or Ray actors (never grouped by this machine's cores): the default 8 × 1 stays.
    result = run("experiments.breakout", *chosen, "--minibatches", "3")
    assert result.returncode == 2 and result.stderr == BATCH.format(8, 1), result.stderr


def write_run(folder: Path, scores: list[float], every: int = 100) -> None:
    """A run folder as a run leaves it: a game ending every `every` agent steps with these scores."""
    with GamesCsv(folder / "games.csv", keep=0) as games:
        games.append([(every * (i + 1), i + 1, score, 10, False) for i, score in enumerate(scores)])
    (folder / "summary.json").write_text(json.dumps({"env_steps": every * len(scores)}))


def test_one_seed_shows_its_score_without_a_spread(tmp_path: Path) -> None:
    write_run(tmp_path / "one" / "seed1", [1.0, 3.0, 5.0])
    for seed, scores in ((1, [2.0, 4.0, 6.0]), (2, [4.0, 6.0, 8.0])):
        write_run(tmp_path / "two" / f"seed{seed}", scores)
    result = run("experiments.curves", "--runs", f"one={tmp_path / 'one'}", "--runs", f"two={tmp_path / 'two'}",
                 "--grid", "100", "--window", "2", "--budgets", "300", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    # At 300, window 2: one's seed mean(3, 5) = 4; two's seeds mean(4, 6) = 5 and mean(6, 8) = 7: 6 ± 1.
    row = next(line for line in result.stdout.splitlines() if line.startswith("| 300 |"))
    assert row.startswith("| 300 | **4.0** (1 seed) | **6.0** ± 1.0 (5.0 / 7.0) |"), row
    assert "± 0.0" not in result.stdout


def test_a_label_too_short_for_the_grid_is_named_in_one_line(tmp_path: Path) -> None:
    write_run(tmp_path / "long" / "seed1", [1.0, 3.0, 5.0, 7.0])  # to 400 agent steps
    for seed in (1, 2):
        write_run(tmp_path / "short" / f"seed{seed}", [2.0, 4.0], every=40)  # to 80
    result = run("experiments.curves", "--runs", f"long={tmp_path / 'long'}", "--runs", f"short={tmp_path / 'short'}",
                 "--grid", "100", "--window", "2", "--budgets", "200", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    line = "note: short: no curve drawn, its runs reach 80 agent steps, less than one --grid step (100); --grid 80 or less draws it."
    assert result.stdout.count(line) == 1, result.stdout
    assert line in (tmp_path / "out" / "table.md").read_text()
    # The label drawn is not named; with a grid the short runs reach, nothing is said.
    assert "long: no curve" not in result.stdout
    fine = run("experiments.curves", "--runs", f"long={tmp_path / 'long'}", "--runs", f"short={tmp_path / 'short'}",
               "--grid", "40", "--window", "2", "--budgets", "200", "--out", str(tmp_path / "fine"))
    assert fine.returncode == 0 and "no curve drawn" not in fine.stdout, fine.stdout
