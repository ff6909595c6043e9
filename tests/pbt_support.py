"""What the population tests share: the tiny population's options, reading its records, waiting
on a running population, stopping one a test gave up on, and the finished population that the
session makes once (tests/made_once.py) for the tests that compare with it or attack copies of it."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from experiments.run.folders import RunFolder
from tests.conftest import Cli

TINY = ["--worker-steps", "16", "--n-workers", "1", "--envs-per-worker", "2", "--backend", "serial",
        "--total-env-steps", "192", "--epochs", "1", "--minibatches", "2"]  # 6 updates of 32 agent steps

# A population of 2, an exploit after update 3 of 6: the one test_pbt_resume.py stops and resumes.
POPULATION = ["--population", "2", "--interval", "3", *TINY]



def run_dir_of(data: Path, run_uuid: str) -> Path | None:
    """The folder of run `run_uuid` under `data`, or None (yet)."""
    folder = RunFolder.named(data, run_uuid, "run")
    return folder.path if folder is not None else None

def rows_of(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def changes_of(row: dict[str, str]) -> dict[str, float]:
    return {name: float(value) for name, value in (pair.split("=") for pair in row["changes"].split())}


def checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    return [torch.load(p, map_location="cpu", weights_only=False) for p in sorted((run_dir / "checkpoints").glob("checkpoint*.pt"))]


def wait_for(condition: Any, process: subprocess.Popen[str], what: str, timeout_s: float = 600) -> Any:
    """Until `condition()` is truthy (returned); fails at once if the population ends first."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert process.poll() is None, f"the population ended first ({what}):\n{process.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.05)
    return value


def stop_for_good(process: subprocess.Popen[str], cli: Cli) -> None:
    """A population a test gave up on: a Ctrl-C to its group, then SIGKILL, then any process of its
    left behind (a killed driver cannot stop its dashboard), each by its pid."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    for pid in cli.leftovers():
        os.kill(pid, signal.SIGKILL)


def make_finished_population(folder: Path) -> None:
    """POPULATION run through without a stop into `folder`/runs; what the command printed and the
    processes it left go to `folder`/result.json, for every test of the session to check."""
    cli = Cli()
    result = cli.run("experiments.pbt", *POPULATION, "--data-dir", str(folder / "runs"), timeout=900)
    leftovers = cli.leftovers()
    for pid in leftovers:  # reported by the tests; never left loading the cores for the rest of the session
        os.kill(pid, signal.SIGKILL)
    (folder / "result.json").write_text(json.dumps({"code": result.returncode, "stdout": result.stdout,
                                                    "stderr": result.stderr, "leftovers": leftovers}))


def read_finished_population(folder: Path) -> dict[str, Any]:
    """The finished population made in `folder`: the command's exit status, output and leftovers, its
    data dir, and (once it completed) its population folder and members' run folders."""
    made = json.loads((folder / "result.json").read_text())
    assert made["code"] == 0, made["stderr"][-3000:]
    data = folder / "runs"
    population = Path(made["stdout"].strip().splitlines()[-1]).parent
    members = json.loads((population / "population.json").read_text())["members"]
    return {**made, "data": data, "folder": population, "run_dirs": [run_dir_of(data, m["run_uuid"]) for m in members]}
