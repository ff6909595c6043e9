"""A resumed run on a real dashboard, with real runs: a run trained with the dashboard, ended,
then resumed with it shows as running while it runs, takes a live change from `tweak` (the run
applies it: the run says so, updates.csv shows it), and ends with its own status; its
configuration card tells the grouping this machine chose from the options the user set, also on a
dashboard that first hears of the run at its resume."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import REPO, RUN_LIMIT_S, Dashboard, Process, run_tool

from configs.grouping import grouped_for_cores, usable_cores
from configs.ppo import PPOConfig
from experiments.run.updates_csv import read_updates

pytestmark = pytest.mark.slow
# No --n-workers/--envs-per-worker: the run groups its 8 games by this machine's cores.
OPTIONS = ["--worker-steps", "16", "--minibatches", "2", "--epochs", "1", "--max-episode-frames", "200",
           "--updates", "400"]


def breakout(data_dir: Path, *args: str) -> Process:
    return Process([sys.executable, "-m", "experiments.breakout", *OPTIONS, "--data-dir", str(data_dir), *args], cwd=REPO)


def until(what: str, check: Callable[[], Any]) -> Any:
    """`check()` once it is truthy: the states waited on here are seen only by asking for them."""
    deadline = time.monotonic() + RUN_LIMIT_S
    while not (found := check()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)
    return found


def hyperparams(dashboard: Dashboard, run_uuid: str) -> dict[str, Any]:
    status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert status == 200, info
    return info


def test_a_resumed_run_runs_takes_a_tweak_and_ends_with_its_status(dashboard: Dashboard, tmp_path: Path) -> None:
    first = breakout(tmp_path, "--stop-after-env-steps", "256", "--dashboard", dashboard.url)  # 2 updates of 128
    assert first.wait() == 0, first.output[-3000:]
    run_uuid = first.wait_for_line(lambda line: line.startswith("breakout run ")).split()[2]
    ended = hyperparams(dashboard, run_uuid)
    assert ended["status"] != "in progress" and ended["refusal"] is not None

    resumed = breakout(tmp_path, "--resume", run_uuid, "--stop-after-env-steps", "none", "--dashboard", dashboard.url)
    try:
        until("the dashboard shows the resumed run running", lambda: hyperparams(dashboard, run_uuid)["status"] == "in progress")
        tweak = run_tool("experiments.tweak", run_uuid, "epochs=2", "--dashboard", dashboard.url)
        assert tweak.returncode == 0, tweak.stderr
        resumed.wait_for_line(lambda line: "live value epochs: 1 → 2" in line)  # the run takes it, and says so
        updates = tmp_path / "breakout" / run_uuid / "updates.csv"
        until("an update trained with 2 epochs", lambda: any(r["epochs_done"] == 2 for r in read_updates(updates)))
    finally:
        resumed.terminate()  # Ctrl-C's path: the run checkpoints and reports itself interrupted
    info = hyperparams(dashboard, run_uuid)
    assert info["status"] == "interrupted" and info["params"]["epochs"]["applied"] == 2
    assert info["refusal"] is not None  # and a finished run takes no change again

    _status, run = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    card = {c["key"]: c["computed"] for c in run["configs"]}
    grouped, cores = grouped_for_cores(PPOConfig(), usable_cores()), usable_cores()
    assert card["n_workers"] == f"{grouped.n_workers} (machine: {cores} usable cores)"  # kept across the resume
    assert card["envs_per_worker"] == f"{grouped.envs_per_worker} (machine: {cores} usable cores)"
    assert card["worker_steps"] == "16 (set)" and card["gamma"] == "0.99 (default)"
    assert card["epochs"] == "2 (live)"


def test_a_late_join_shows_the_grouping_the_first_legs_machine_chose(dashboard: Dashboard, tmp_path: Path) -> None:
    first = breakout(tmp_path, "--stop-after-env-steps", "128")  # 1 update of 128, no dashboard
    assert first.wait() == 0, first.output[-3000:]
    run_uuid = first.wait_for_line(lambda line: line.startswith("breakout run ")).split()[2]
    resumed = breakout(tmp_path, "--resume", run_uuid, "--stop-after-env-steps", "256", "--dashboard", dashboard.url)
    assert resumed.wait() == 0, resumed.output[-3000:]
    _status, run = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    card = {c["key"]: c["computed"] for c in run["configs"]}
    grouped, cores = grouped_for_cores(PPOConfig(), usable_cores()), usable_cores()
    assert card["n_workers"] == f"{grouped.n_workers} (machine: {cores} usable cores)"
    assert card["envs_per_worker"] == f"{grouped.envs_per_worker} (machine: {cores} usable cores)"
    assert card["worker_steps"] == "16 (set)"
