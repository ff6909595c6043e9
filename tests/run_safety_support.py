"""What the run-safety tests share: the short runs they resume, craft or attack (each made once a
session, conftest.run_once), and the checks that a resume or a start was refused before anything
started."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import Cli, refused_in_process, run_once
from tests.test_experiment import TINY

PER_UPDATE = 2 * 16  # agent steps of one TINY update


def first_leg(cli: Cli, tmp_path: Path, *extra: str) -> dict:
    """A TINY run stopped after 1 of 3 updates (a run option: the resume goes on to 3); made once a
    session and copied here (conftest.run_once)."""
    return run_once(cli, tmp_path, "--updates", "3", *TINY, "--stop-after-env-steps", str(PER_UPDATE), *extra)


def two_checkpointed_updates(cli: Cli, tmp_path: Path) -> dict:
    """A TINY run stopped after 2 of 3 updates, checkpointed after each (checkpoint.pt and
    checkpoint.1.pt); made once a session and copied here (conftest.run_once, which keeps file modes)."""
    return run_once(cli, tmp_path, "--updates", "3", *TINY, "--checkpoint-every", "1",
                    "--stop-after-env-steps", str(2 * PER_UPDATE))


def refused_resume(cli: Cli, tmp_path: Path, summary: dict) -> list[str]:
    """The stderr lines of a `--resume` of the run that must be refused: exit 2, no byte of its
    folder changed, no process left."""
    run_dir = Path(summary["run_dir"])

    def files() -> dict[Path, bytes]:
        return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    before = files()
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--data-dir", str(tmp_path))
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    assert files() == before
    assert cli.leftovers() == []
    return resumed.stderr.strip().splitlines()


def refused_resume_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path, summary: dict) -> list[str]:
    """refused_resume with the same `--resume` given to the command's main() in this process: a
    refusal made before anything starts needs no Python of its own to prove it (`refused_in_process`,
    and no byte of the run folder changed)."""
    run_dir = Path(summary["run_dir"])

    def files() -> dict[Path, bytes]:
        return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    before = files()
    line = refused_in_process(capsys, ["--resume", summary["run_uuid"], "--data-dir", str(tmp_path)])
    assert files() == before
    return [line]


def refused_before_anything_started(cli: Cli, result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().startswith(expected) and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""
    assert cli.leftovers() == []  # no worker was ever started


# The action-sampling state the H200's 10M-step run saved at update 2,265 (docs/results.md): CUDA's
# Philox generator, a seed (1454127163) and an offset (2,319,360), 8 little-endian bytes each.
H200_SAMPLING_STATE = [59, 56, 172, 86, 0, 0, 0, 0, 0, 100, 35, 0, 0, 0, 0, 0]
