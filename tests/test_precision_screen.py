"""`tools/precision_screen.py` (one update per arithmetic and minibatch order, from a real checkpoint)
and `tools/non_inferiority.py` (the rule a new default must pass), through their real command lines;
their measures worked out by hand."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, Cli
from tests.run_safety_support import PER_UPDATE, first_leg
from tools.precision_screen import bias, distances


def tool(cli: Cli, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python tools/NAME.py ARGS` from the checkout, with this checkout's packages first on the path."""
    env = cli.env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(REPO / "tools" / f"{name}.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_distance_between_two_updates_worked_by_hand() -> None:
    # θ0 = (0, 0), the reference lands on (3, 4) (a step of length 5), θ on (3, 5): 1 / 5 apart.
    # Policies: the reference's uniform (½, ½), θ's softmax(ln 3, 0) = (¾, ¼);
    # KL = ½ ln(½ / ¾) + ½ ln(½ / ¼) = ½ (−0.405465) + ½ (0.693147) = 0.143841.
    measured = distances(torch, torch.tensor([3.0, 5.0]), torch.tensor([3.0, 4.0]), torch.zeros(2),
                         torch.tensor([[math.log(3), 0.0]]), torch.zeros(1, 2))
    assert measured["rel"] == pytest.approx(0.2) and measured["kl"] == pytest.approx(0.143841, abs=1e-6)


def test_the_bias_along_the_fp32_step_worked_by_hand() -> None:
    # fp32 steps (1, 0) twice: the direction (1, 0), length 1. The candidate's steps differ from them
    # by (0.1, 0) and (0.3, 5): along the direction 0.1 and 0.3 (the sideways 5 is not a bias along
    # the step), mean 0.2, sample std 0.141421, standard error 0.1: t = 2, shrink +0.2 (longer steps).
    measured = bias([torch.tensor([1.1, 0.0]), torch.tensor([1.3, 5.0])], [torch.tensor([1.0, 0.0])] * 2)
    assert measured["t"] == pytest.approx(2.0) and measured["shrink"] == pytest.approx(0.2) and measured["orders"] == 2


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_the_screen_measures_each_arithmetic_against_the_order_noise_and_leaves_the_run_alone(cli, tmp_path: Path) -> None:
    checkpoint = first_leg(cli, tmp_path)["checkpoint"]  # a real run after 1 of 3 updates, made once a session
    before = digests(tmp_path)
    result = tool(cli, "precision_screen", "--checkpoints", checkpoint, "--precisions", "bf16", "bf16-emulated", "bf16-then-fp32",
                  "--orders", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    (row,) = report["rows"]
    assert (row["update"], row["env_steps"], row["held_out_frames"]) == (1, PER_UPDATE, PER_UPDATE)
    for measure in ("rel", "kl"):
        noise = row["noise"][measure]
        assert 0 < noise["min"] <= noise["median"] <= noise["max"]  # another order really changes the update
        for precision in ("bf16", "bf16-emulated"):
            entry = row["precisions"][precision]
            assert entry["deviation"][measure] > 0  # bf16 really rounded
            assert entry["passes"] == all(entry["deviation"][m] < row["noise"][m]["min"] for m in ("rel", "kl"))
        # The yardsticks: the same arithmetic through the other layout's kernels, for fp32 and bf16.
        assert set(row["summation_order"]) == {"fp32", "bf16"}
        assert row["emulation"][measure]["bf16_from_fp32"] == pytest.approx(row["precisions"]["bf16"]["deviation"][measure])
    assert row["precisions"]["bf16"]["bias"]["orders"] == 3
    # The candidate's next update here (index 1 of 3) is in its bf16 nine tenths (fp32 from index
    # 0.9 × 3 = 2.7 on): the screen measures the same update as bf16's, to the bit.
    assert row["precisions"]["bf16-then-fp32"]["deviation"] == row["precisions"]["bf16"]["deviation"]
    assert "below the order noise" in result.stdout and "bf16-emulated from bf16" in result.stdout
    assert digests(tmp_path) == before  # nothing written to the run
    assert cli.leftovers() == []


@pytest.mark.parametrize(("args", "expected"), [
    (["--orders", "1"], "error: --orders 1: expected a whole number of other minibatch orders, 2 to 256\n"),
    (["--precisions", "fp32"], "error: --precisions fp32: expected bf16, bf16-emulated or bf16-then-fp32 (each is compared with fp32)\n"),
    (["--precisions", "fp16"], "error: --precisions fp16: expected bf16, bf16-emulated or bf16-then-fp32 (each is compared with fp32)\n"),
])
def test_a_bad_screen_option_is_one_line_and_exit_2(cli, args: list[str], expected: str, tmp_path: Path) -> None:
    result = tool(cli, "precision_screen", "--checkpoints", str(tmp_path / "none.pt"), *args)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", expected)


def test_a_missing_checkpoint_is_one_line_and_exit_2(cli, tmp_path: Path) -> None:
    result = tool(cli, "precision_screen", "--checkpoints", str(tmp_path / "none.pt"))
    assert result.returncode == 2 and result.stderr.startswith(f"error: --checkpoints {tmp_path / 'none.pt'}: expected a checkpoint file")
    assert result.stderr.count("\n") == 1


def write_run(folder: Path, score: float) -> None:
    """A run folder whose only game ends at agent step 1,000 with `score`: its score there."""
    folder.mkdir(parents=True)
    (folder / "games.csv").write_text(f"env_step,update,score,length,truncated\n1000,1,{score},100,0\n")


def test_the_non_inferiority_rule_worked_by_hand(cli, tmp_path: Path) -> None:
    # Reference 10, 12, 14 (sd 2: margin 1); candidate 11, 13, 15: difference +1, se √(4/3 + 4/3)
    # = 1.63299, Welch df 4, one-sided 95% t 2.1318: lower bound 1 − 3.4813 = −2.48, under −1, so
    # the rule does not hold; seeds a side for it: 6.182557 × (4 + 4) / 1 = 49.46, so 50.
    for side, scores in (("reference", (10, 12, 14)), ("candidate", (11, 13, 15))):
        for seed, score in enumerate(scores):
            write_run(tmp_path / side / f"seed{seed}", score)
    result = tool(cli, "non_inferiority", "--runs", f"fp32={tmp_path / 'reference'}", "--runs", f"new={tmp_path / 'candidate'}",
                  "--budgets", "1000")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    (row,) = report["rows"]
    assert (row["reference"], row["candidate"]) == ([10, 12, 14], [11, 13, 15])
    assert row["margin"] == pytest.approx(1.0) and row["difference"] == pytest.approx(1.0)
    assert row["low"] == pytest.approx(-2.4813, abs=1e-3) and not row["holds"] and row["seeds_needed"] == 50
    # If the candidate is truly 1 higher, at 50 a side it holds above −1 + 1.644854 × √(8 / 50) =
    # −0.342058; the 47 seeds a side to come move the difference by √(47 × 4 + 47 × 4) / 50 =
    # 0.387814: Φ((1 + 0.342058) / 0.387814) = Φ(3.460573) = 0.99973.
    assert row["chance_if_as_measured"] == pytest.approx(0.99973, abs=1e-4)
    assert "| 1,000 | 12.0 ± 2.0 (3) | 13.0 ± 2.0 (3) | 1.00 | +1.00 [-2.48] | no | 50 | 100% |" in result.stdout
    assert report["holds"] is False and "the rule does not hold" in result.stdout
    # A margin of 2 spreads (4 points) is wide enough for these three seeds: −2.48 > −4.
    wide = tool(cli, "non_inferiority", "--runs", f"fp32={tmp_path / 'reference'}", "--runs", f"new={tmp_path / 'candidate'}",
                "--budgets", "1000", "--margin-share", "2")
    assert json.loads(wide.stdout.strip().splitlines()[-1])["holds"] is True


@pytest.mark.parametrize(("args", "expected"), [
    (["--margin-share", "0"], "error: --margin-share 0: expected a number > 0 (the margin as a share of the reference's seed spread)\n"),
    (["--margin-share", "nan"], "error: --margin-share nan: expected a number > 0 (the margin as a share of the reference's seed spread)\n"),
])
def test_a_bad_margin_is_one_line_and_exit_2(cli, args: list[str], expected: str, tmp_path: Path) -> None:
    write_run(tmp_path / "a" / "seed1", 1.0)
    result = tool(cli, "non_inferiority", "--runs", f"a={tmp_path / 'a'}", "--runs", f"b={tmp_path / 'a'}", *args)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", expected)


def test_one_label_is_refused_in_one_line(cli, tmp_path: Path) -> None:
    write_run(tmp_path / "a" / "seed1", 1.0)
    result = tool(cli, "non_inferiority", "--runs", f"a={tmp_path / 'a'}")
    assert (result.returncode, result.stderr) == (2, "error: --runs: expected two labels, the reference's and the candidate's (got 1: a)\n")
