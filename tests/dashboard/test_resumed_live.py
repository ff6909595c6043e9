"""A resumed run on a real dashboard, with a real run in three legs: trained without a dashboard,
resumed with one (which first hears of the run then) and ended, it shows the grouping the first
leg's machine chose from the options the user set; resumed with the dashboard again, it shows as
running while it runs, takes a live change from `tweak` (the run applies it: the run says so,
updates.csv shows it), and ends with its own status, its card still telling that grouping."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import REPO, RUN_LIMIT_S, Dashboard, Process, run_tool

from configs.launch import grouped_for_cores
from configs.machine import usable_cores
from configs.ppo import PPOConfig
from experiments.run.updates_csv import read_updates
from tests.conftest import Cli, run_once

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


def card(dashboard: Dashboard, run_uuid: str) -> dict[str, str]:
    """The run page's Configurations card: each option's value as it is shown."""
    _status, run = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    return {c["key"]: c["computed"] for c in run["configs"]}


@pytest.fixture(scope="module")
def joined_late(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run of 1 update of 128 agent steps trained without a dashboard (made once a session),
    resumed with the module's dashboard for 1 more: its folder, uuid and card as that leg ended."""
    data_dir = tmp_path_factory.mktemp("runs")
    run_uuid = run_once(Cli(), data_dir, *OPTIONS, "--stop-after-env-steps", "128")["run_uuid"]
    resumed = breakout(data_dir, "--resume", run_uuid, "--stop-after-env-steps", "256", "--dashboard", dashboard.url)
    assert resumed.wait() == 0, resumed.output[-3000:]
    return {"data_dir": data_dir, "run_uuid": run_uuid, "card": card(dashboard, run_uuid)}


def test_a_resumed_run_runs_takes_a_tweak_and_ends_with_its_status(dashboard: Dashboard, joined_late: dict[str, Any]) -> None:
    data_dir, run_uuid = joined_late["data_dir"], joined_late["run_uuid"]
    ended = hyperparams(dashboard, run_uuid)  # the leg that joined late ended with the dashboard
    assert ended["status"] != "in progress" and ended["refusal"] is not None

    resumed = breakout(data_dir, "--resume", run_uuid, "--stop-after-env-steps", "none", "--dashboard", dashboard.url)
    try:
        until("the dashboard shows the resumed run running", lambda: hyperparams(dashboard, run_uuid)["status"] == "in progress")
        tweak = run_tool("experiments.tweak", run_uuid, "epochs=2", "--dashboard", dashboard.url)
        assert tweak.returncode == 0, tweak.stderr
        resumed.wait_for_line(lambda line: "live value epochs: 1 → 2" in line)  # the run takes it, and says so
        updates = data_dir / "breakout" / run_uuid / "updates.csv"
        until("an update trained with 2 epochs", lambda: any(r["epochs_done"] == 2 for r in read_updates(updates)))
    finally:
        resumed.terminate()  # Ctrl-C's path: the run checkpoints and reports itself interrupted
    info = hyperparams(dashboard, run_uuid)
    assert info["status"] == "interrupted" and info["params"]["epochs"]["applied"] == 2
    assert info["refusal"] is not None  # and a finished run takes no change again

    shown = card(dashboard, run_uuid)
    grouped, cores = grouped_for_cores(PPOConfig(), usable_cores()), usable_cores()
    assert shown["n_workers"] == f"{grouped.n_workers} (machine: {cores} usable cores)"  # kept across the resumes
    assert shown["envs_per_worker"] == f"{grouped.envs_per_worker} (machine: {cores} usable cores)"
    assert shown["worker_steps"] == "16 (set)" and shown["gamma"] == "0.99 (default)"
    assert shown["epochs"] == "2 (live)"


def test_a_late_join_shows_the_grouping_the_first_legs_machine_chose(joined_late: dict[str, Any]) -> None:
    shown = joined_late["card"]  # as the dashboard showed it once the leg that joined late ended
    grouped, cores = grouped_for_cores(PPOConfig(), usable_cores()), usable_cores()
    assert shown["n_workers"] == f"{grouped.n_workers} (machine: {cores} usable cores)"
    assert shown["envs_per_worker"] == f"{grouped.envs_per_worker} (machine: {cores} usable cores)"
    assert shown["worker_steps"] == "16 (set)"
