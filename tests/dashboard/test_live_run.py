"""A real labml run sends to a real dashboard; a live change made in a terminal reaches it."""

from __future__ import annotations

import base64
import time
from array import array
from pathlib import Path
from typing import Any

from dashboard_support import RUN_LIMIT_S, Dashboard, ProbeRun, run_tool


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + RUN_LIMIT_S  # a cap: the loop ends as soon as the condition holds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def series_of(metrics: dict[str, Any], name: str) -> dict[str, list[float]]:
    """labml-app sends each series' steps and values as base64 float32 arrays."""
    series = next(s for s in metrics["series"] if s["name"] == name)
    return {k: list(array("f", base64.b64decode(series[k]))) for k in ("step", "value")}


def test_run_configs_and_metrics_reach_the_dashboard(dashboard: Dashboard, finished_run: str) -> None:
    status, run = dashboard.request("GET", f"/api/v1/run/{finished_run}")
    assert status == 200
    assert run["run_uuid"] == finished_run and run["name"] == "probe"
    configs = {c["key"]: c for c in run["configs"]}
    # A live hyperparameter shows its current value (here the one declared); `value` is the declaration.
    assert configs["learning_rate"]["computed"] == "0.00025 (live)"
    assert configs["learning_rate"]["value"]["type"] == "DynamicSchedule"
    assert configs["gamma"]["computed"] == "0.99 (default)"  # the card says who chose each value

    # Claimed automatically: listed under "Runs" rather than waiting to be deleted.
    assert run["is_claimed"] is True
    status, runs = dashboard.request("GET", "/api/v1/runs/null")
    assert status == 200 and finished_run in [r["run_uuid"] for r in runs["runs"]]

    status, metrics = dashboard.request("POST", f"/api/v1/metrics/{finished_run}", {"get_all": True})
    assert status == 200
    loss = series_of(metrics, "loss")
    assert loss["step"][-1] == 11  # the probe tracked steps 0..11
    assert all(0.3 < v <= 1.0 for v in loss["value"])  # exp(-step / 10)


def test_live_change_from_the_terminal_reaches_the_running_script(dashboard: Dashboard, tmp_path: Path) -> None:
    probe = ProbeRun(tmp_path, f"{dashboard.url}/api/v1/default", "2000", "--until", "learning_rate=0.001")
    try:
        run_uuid = probe.run_uuid()
        # The run's configs (and so its dynamic hyperparameters) arrive with an update after the one
        # whose answer makes labml print the run's page.
        probe.wait_for_line(lambda line: "Monitor experiment at" in line)
        wait_for(lambda: dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")[1].get("params"), "the run's configs")

        listed = run_tool("experiments.tweak", run_uuid, "--dashboard", dashboard.url)
        assert listed.returncode == 0, listed.stderr
        assert "learning_rate = 0.00025  float in [0.0, 0.01]" in listed.stdout

        tweak = run_tool("experiments.tweak", run_uuid, "learning_rate=1e-3", "epochs=6",
                         "--dashboard", dashboard.url)
        assert tweak.returncode == 0, tweak.stderr
        assert "queued: " in tweak.stdout and "learning_rate=0.001" in tweak.stdout

        probe.wait_for_line(lambda line: line.endswith("SAW learning_rate=0.001"))
        assert probe.wait() == 0, probe.output
        # labml's screen writer shares the line with the probe's print.
        step_lines = [line[line.index("STEP "):] for line in probe.lines if "STEP " in line]
        assert "epochs=6" in step_lines[-1]
    finally:
        probe.kill()

    # The change was delivered (so no longer pending), and the run tracked it as hp.<key>.
    status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert status == 200
    learning_rate = info["params"]["learning_rate"]
    assert learning_rate["current"] == 0.001 and learning_rate["pending"] is None
    assert learning_rate["reported"] == 0.001
    assert info["params"]["epochs"]["reported"] == 6


def test_tweak_refuses_bad_changes_with_one_line(dashboard: Dashboard, finished_run: str) -> None:
    cases = {
        "learning_rate=0.5": "expected a value in [0, 0.01]",
        "epochs=2.5": "expected an integer",
        "gamma=0.9": "not a live hyperparameter",
        "nonsense=1": "not a live hyperparameter",
        "learning_rate=fast": "'fast' is not a number",
        "learning_rate": "expected NAME=VALUE",
    }
    for change, message in cases.items():
        result = run_tool("experiments.tweak", finished_run, change, "--dashboard", dashboard.url)
        assert result.returncode == 2, (change, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert message in result.stderr, (change, result.stderr)
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{finished_run}")
    assert all(p["pending"] is None for p in info["params"].values())  # nothing half-applied

    unknown = run_tool("experiments.tweak", "f" * 32, "learning_rate=0.001", "--dashboard", dashboard.url)
    assert unknown.returncode == 2 and f"the dashboard at {dashboard.url} knows" in unknown.stderr, unknown.stderr
