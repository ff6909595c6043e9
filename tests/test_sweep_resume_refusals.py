"""`sweep --resume CSV` given a file that is not this sweep's results: refused in one line, exit 2,
before anything is made (issue 71's F1 and F4 among them). No cluster is needed: the CSV is read
and checked before Ray starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ray_setup.installed import ray_installed
from tests.cluster_support import TINY
from tests.conftest import Cli

# The sweep refuses a missing Ray first, in another line.
pytestmark = [pytest.mark.ray, pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[ray]")')]


def test_a_sweep_resumed_from_a_csv_of_other_trials_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing is run when the CSV is not this sweep's: another grid value, or another count."""
    from experiments.sweep import main as sweep_main
    from tests.conftest import refused_in_process

    results = tmp_path / "sweep.csv"
    results.write_text("rank,trial,status,learning_rate,run_uuid\n1,1,completed,0.0003," + "a" * 32 + "\n"
                       "2,2,lost,0.0001," + "b" * 32 + "\n")
    argv = ["--data-dir", str(tmp_path / "runs"), "--resume", str(results), *TINY]
    assert refused_in_process(capsys, ["--grid", "learning_rate=1e-4,2e-4", *argv], sweep_main) == (
        f"error: --resume {results}: trial 1 has learning_rate=0.0003 there, 0.0001 here: give the options the sweep was started with")
    assert refused_in_process(capsys, ["--grid", "learning_rate=1e-4", *argv], sweep_main) == (
        f"error: --resume {results}: expected the results of this sweep's 1 trials (it holds 2 rows): give the options the sweep "
        "was started with")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("uuids", "expected"), [
    # F1 (issue 71): a lost trial's run_uuid made its run folder wherever the path led, and another
    # run's uuid would have continued that run and rewritten it.
    (["a" * 32, "../../../../elsewhere/escape"], "trial 2 has run_uuid='../../../../elsewhere/escape' there: expected the uuid "
                                                 "of a run (32 hex digits)"),
    (["a" * 32, "A" * 32], f"trial 2 has run_uuid={'A' * 32!r} there: expected the uuid of a run (32 hex digits)"),
    (["a" * 32, "a" * 32], "expected one run per trial (a run_uuid is listed twice)"),
])
def test_a_sweep_csv_whose_run_uuid_is_not_a_runs_is_refused_before_anything_is_made(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], uuids: list[str], expected: str) -> None:
    from experiments.sweep import main as sweep_main
    from tests.conftest import refused_in_process

    results = tmp_path / "sweep.csv"
    results.write_text(f"rank,trial,status,learning_rate,run_uuid\n1,1,completed,0.0001,{uuids[0]}\n2,2,lost,0.0002,{uuids[1]}\n")
    argv = ["--grid", "learning_rate=1e-4,2e-4", "--data-dir", str(tmp_path / "runs"), "--resume", str(results), *TINY]
    assert refused_in_process(capsys, argv, sweep_main) == f"error: --resume {results}: {expected}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.csv"]


def test_a_sweep_resumed_from_a_fifo_is_refused_in_one_line_not_left_waiting(cli: Cli, tmp_path: Path) -> None:
    """F4 (issue 71): `--resume FIFO` waited for ever for a writer."""
    fifo = tmp_path / "sweep.csv"
    os.mkfifo(fifo)
    result = cli.run("experiments.sweep", "--grid", "learning_rate=1e-4", "--data-dir", str(tmp_path / "runs"),
                     "--resume", str(fifo), *TINY, timeout=120)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"error: --resume {fifo}: expected a sweep's results CSV (a regular file; this is a FIFO, "
                             "device, socket or folder)\n")
    assert not (tmp_path / "runs").exists()
