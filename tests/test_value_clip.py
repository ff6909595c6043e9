"""`tools/value_clip.py`: one update per value clip ε from a real run's checkpoint, through its real command line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppo.checkpoint import load_checkpoint, save_checkpoint
from tests.conftest import REPO, Cli

# 2 games × 32 steps = 64 agent steps per update; a schedule of 256 steps is 4 updates. The
# value clip tied to the annealed policy clip (ppo2's rule), so the run's own ε is worked out by hand below.
TINY_RUN = ["--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "32", "--minibatches", "2", "--epochs", "1",
            "--total-env-steps", "256", "--stop-after-env-steps", "128", "--seed", "3", "--value-clip-range", "none"]


def value_clip(cli: Cli, *args: str) -> subprocess.CompletedProcess[str]:
    """`python tools/value_clip.py ARGS` from the checkout, as its docstring runs it, with this
    checkout's packages first on the path (not an installed copy's)."""
    env = cli.env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(REPO / "tools" / "value_clip.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real run stopped after update 2 of 4: (its data dir, its uuid)."""
    data_dir = tmp_path_factory.mktemp("runs")
    result = Cli().run("experiments.breakout", *TINY_RUN, "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    return data_dir, summary["run_uuid"]


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_each_epsilon_gets_one_update_from_the_checkpoint_and_the_run_is_untouched(cli, trained) -> None:
    data_dir, uuid = trained
    before = digests(data_dir)
    result = value_clip(cli, "--run", uuid, "--data-dir", str(data_dir), "--epsilons", "0", "1e9", "1e9")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["run_uuid"], report["update"], report["n_updates"], report["env_steps"]) == (uuid, 2, 4, 128)
    # The next update's clip, annealed by hand: 0.1 × (1 − 2/4).
    assert report["clip_range"] == pytest.approx(0.05)
    own, zero, huge, again = report["rows"]
    assert own["label"] == "the run's own: 0.05 (the policy's clip, annealed)" and own["value_clip_range"] == pytest.approx(0.05)
    # ε = 0 holds back every sample whose value moved towards its return (after the first minibatch, most);
    # no value moves by 1e9, so that clip holds back none.
    assert zero["value_clip_fraction"] > 0 and huge["value_clip_fraction"] == 0.0
    # Each ε starts from the same parameters, Adam state and shuffle: the same ε gives the same update, bit for bit.
    assert huge == again
    assert "value clip ε" in result.stdout and "the run's own: 0.05" in result.stdout
    assert digests(data_dir) == before  # nothing written: checkpoint, games.csv, summary as they were
    assert cli.leftovers() == []


@pytest.mark.parametrize(("args", "expected"), [
    (["--epsilons", "-1"], "error: --epsilons -1: expected finite numbers ≥ 0 (value clip ranges, in the value's own units)\n"),
    (["--epsilons", "0.1", "nan"], "error: --epsilons nan: expected finite numbers ≥ 0 (value clip ranges, in the value's own units)\n"),
    (["--epsilons", "inf"], "error: --epsilons inf: expected finite numbers ≥ 0 (value clip ranges, in the value's own units)\n"),
])
def test_a_bad_epsilon_is_one_line_and_exit_2(cli, args: list[str], expected: str, tmp_path: Path) -> None:
    result = value_clip(cli, "--run", "0" * 32, "--data-dir", str(tmp_path), *args)
    assert (result.returncode, result.stderr) == (2, expected)


def test_a_run_that_is_not_there_is_one_line_and_exit_2(cli, tmp_path: Path) -> None:
    result = value_clip(cli, "--run", "0" * 32, "--data-dir", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: --run {'0' * 32}: expected the uuid (32 hex digits) of a run under {tmp_path}/")


@pytest.mark.slow
def test_a_checkpoint_with_an_impossible_config_is_refused_before_any_game_starts(cli, trained, tmp_path: Path) -> None:
    # A crafted file: the run's own checkpoint with 3 minibatches, which do not divide its batch of 64.
    data_dir, _ = trained
    state = load_checkpoint(next(data_dir.rglob("checkpoint.pt")))
    state["config"]["minibatches"] = 3
    crafted = tmp_path / "crafted.pt"
    save_checkpoint(crafted, state)
    result = value_clip(cli, "--checkpoint", str(crafted))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --checkpoint {crafted}: expected a checkpoint written by python -m experiments.breakout")
    assert "minibatches 3" in result.stderr
    assert cli.leftovers() == []


def test_help_names_the_script_as_it_is_run(cli) -> None:
    result = value_clip(cli, "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: python tools/value_clip.py [-h] [--version]"), result.stdout[:300]
    assert "--epsilons E [E ...]" in result.stdout and result.stderr == ""
