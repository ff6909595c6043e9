"""Live changes tell the truth on a real dashboard: a change reaches only the run that applies it
(never a request claiming another rank), shows as pending, then sent, and as applied only once
the run reports training with it; a run that is not running takes none (API 409, tweak one line)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from dashboard_support import Dashboard, run_tool

# A dashboard of this module's own (tests/dashboard/conftest.py): the size of the store's hyperparams.json
# is measured, which other modules' runs would change.
FRESH_DASHBOARD = True

DECLARED = {"type": "DynamicSchedule", "default": 2.5e-4, "range": [0.0, 1e-2], "dynamic_type": "float"}
EPOCHS = {"type": "DynamicSchedule", "default": 4, "range": [1, 16], "dynamic_type": "int"}


def track(dashboard: Dashboard, run_uuid: str, packet: dict[str, Any], query: str = "") -> dict[str, Any]:
    status, answer = dashboard.request(
        "POST", f"/api/v1/default/track?run_uuid={run_uuid}&labml_version=0.5.3{query}", packet)
    assert status == 200, answer
    return answer


def new_run(dashboard: Dashboard) -> str:
    """A run as labml's client of a one-process run starts it: its configs with two live values."""
    run_uuid = uuid.uuid4().hex
    track(dashboard, run_uuid, {"name": "victim", "configs": {
        "learning_rate": {"name": "learning_rate", "computed": DECLARED},
        "epochs": {"name": "epochs", "computed": EPOCHS}}, "time": 1.0})
    return run_uuid


def reports(learning_rate: float, epochs: float, step: int) -> dict[str, Any]:
    return {"track": {"hp.learning_rate": {"step": [step], "value": [learning_rate]},
                      "hp.epochs": {"step": [step], "value": [epochs]}}, "time": 2.0}


def shown(dashboard: Dashboard, run_uuid: str, key: str) -> str:
    """What the run page's Configurations card shows for `key`."""
    _status, run = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    return next(c["computed"] for c in run["configs"] if c["key"] == key)


@pytest.mark.parametrize("spoof", ["&rank=1&world_size=2&main_rank=1", "&rank=1&world_size=1&main_rank=1",
                                   "&rank=1&world_size=2&main_rank=0"])
def test_a_request_claiming_another_rank_neither_receives_nor_consumes_changes(dashboard: Dashboard,
                                                                                spoof: str) -> None:
    victim = new_run(dashboard)
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{victim}", {"learning_rate": 5e-4})
    assert status == 200
    answer = track(dashboard, victim, {"track": {}, "time": 2.0}, spoof)
    assert answer["dynamic"] == {}
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{victim}")
    assert info["params"]["learning_rate"]["pending"] == 5e-4 and info["params"]["learning_rate"]["sent"] is None
    assert shown(dashboard, victim, "learning_rate") == "0.00025 (live; 0.0005 pending)"
    # The run itself (rank 0 of a one-process run, as labml sends it) gets it.
    assert track(dashboard, victim, {"track": {}, "time": 3.0}, "&rank=0&world_size=1&main_rank=0")["dynamic"] == {
        "learning_rate": 5e-4}


def test_a_change_shows_as_pending_then_sent_then_applied_when_the_run_reports_it(dashboard: Dashboard) -> None:
    run_uuid = new_run(dashboard)
    track(dashboard, run_uuid, reports(2.5e-4, 4.0, 1))
    assert shown(dashboard, run_uuid, "epochs") == "4 (live)"
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"epochs": 6})
    assert status == 200
    assert shown(dashboard, run_uuid, "epochs") == "4 (live; 6 pending)"
    assert track(dashboard, run_uuid, reports(2.5e-4, 4.0, 2))["dynamic"] == {"epochs": 6}
    assert shown(dashboard, run_uuid, "epochs") == "4 (live; 6 sent, not applied yet)"
    # labml delivers what the run tracked before the change arrived: still not applied.
    track(dashboard, run_uuid, reports(2.5e-4, 4.0, 3))
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["params"]["epochs"] | {"range": None} == {
        "type": "int", "default": 4, "range": None, "applied": 4, "current": 4, "reported": 4, "sent": 6, "pending": None}
    track(dashboard, run_uuid, reports(2.5e-4, 6.0, 4))
    assert shown(dashboard, run_uuid, "epochs") == "6 (live)"
    listed = run_tool("experiments.tweak", run_uuid, "--dashboard", dashboard.url)
    assert "epochs = 6  int in [1, 16]\n" in listed.stdout  # an integer, not 6.0


def test_a_change_to_a_run_that_has_ended_is_refused(dashboard: Dashboard) -> None:
    run_uuid = new_run(dashboard)
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"epochs": 6})
    assert status == 200
    # The run ends before it sends again: its change can no longer reach it, and is not kept.
    track(dashboard, run_uuid, {"status": {"rank": 0, "status": "completed", "time": 3.0}, "time": 3.0})
    status, answer = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"epochs": 3})
    assert status == 409
    assert answer["error"] == (f"run {run_uuid} is completed: a live change reaches only a running run; "
                               f"resume it with --dashboard and change it while it runs")
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["params"]["epochs"]["pending"] is None and info["refusal"] == answer["error"]

    tweak = run_tool("experiments.tweak", run_uuid, "epochs=3", "--dashboard", dashboard.url)
    assert tweak.returncode == 2 and tweak.stdout == ""
    assert tweak.stderr.splitlines() == [f"error: {answer['error']}"]
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["params"]["epochs"]["pending"] is None


def leg_start(pid: int) -> dict[str, Any]:
    """What labml's client sends as `experiment.start()` begins a leg (labml's AppExperiment.start)."""
    return {"name": "victim", "comment": "", "computer": "c0ffee", "start_step": 0, "tags": [], "pid": pid, "time": 4.0}


def test_a_resumed_run_runs_again_takes_changes_and_ends_with_its_own_status(dashboard: Dashboard) -> None:
    run_uuid = new_run(dashboard)
    track(dashboard, run_uuid, {**leg_start(100), "time": 1.5})  # its first leg began: nothing changes
    track(dashboard, run_uuid, {"status": {"rank": 0, "status": "interrupted", "time": 3.0}, "time": 3.0})
    # A resume brings its history before its leg starts (experiments/run/labml/history.py): still ended.
    track(dashboard, run_uuid, reports(2.5e-4, 4, 10))
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"epochs": 6})
    assert status == 409
    track(dashboard, run_uuid, leg_start(200))  # the resumed process starts its leg
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["status"] == "in progress" and info["refusal"] is None
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"epochs": 6})
    assert status == 200
    assert track(dashboard, run_uuid, reports(2.5e-4, 4, 20))["dynamic"] == {"epochs": 6}
    track(dashboard, run_uuid, {**reports(2.5e-4, 6, 30), "status": {"rank": 0, "status": "completed", "time": 5.0}})
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["status"] == "completed" and info["params"]["epochs"]["applied"] == 6
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"epochs": 3})
    assert status == 409


def test_a_leg_that_starts_and_ends_in_one_request_ends_with_its_status(dashboard: Dashboard) -> None:
    run_uuid = new_run(dashboard)
    track(dashboard, run_uuid, {"status": {"rank": 0, "status": "completed", "time": 3.0}, "time": 3.0})
    track(dashboard, run_uuid, {**leg_start(300), "status": {"rank": 0, "status": "crashed", "time": 6.0}})
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["status"] == "crashed"


def test_a_change_queued_for_the_next_leg_waits_for_it_and_reaches_it(dashboard: Dashboard) -> None:
    # What population-based training does between two segments of a member (experiments/pbt).
    run_uuid = new_run(dashboard)
    track(dashboard, run_uuid, {"status": {"rank": 0, "status": "completed", "time": 3.0}, "time": 3.0})
    status, answer = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}?when=later", {"epochs": 6})
    assert (status, answer["error"]) == (400, "when 'later': expected next-leg, or nothing for a running run")
    status, answer = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}?when=next-leg", {"epochs": 6})
    assert (status, answer["pending"]) == (200, {"epochs": 6})
    # The history a resume posts before its leg starts neither takes it nor reopens the run.
    assert track(dashboard, run_uuid, reports(2.5e-4, 4, 10))["dynamic"] == {}
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["status"] == "completed" and info["params"]["epochs"]["pending"] == 6
    # The leg's first message is answered with it.
    assert track(dashboard, run_uuid, leg_start(400))["dynamic"] == {"epochs": 6}
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["params"]["epochs"]["pending"] is None and info["params"]["epochs"]["sent"] == 6


def test_reported_values_are_kept_for_the_run_s_live_keys_only(dashboard: Dashboard) -> None:
    """Any client may send `hp.*` series of any name. Each reported value was kept in
    hyperparams.json, which is rewritten whole on every change: a client grew it to 16 MB. Only the
    run's declared live keys are kept, and they still take changes and report them."""
    hyperparams = dashboard.data_dir / "hyperparams.json"
    run_uuid = new_run(dashboard)
    track(dashboard, run_uuid, reports(2.5e-4, 4.0, 1))
    before = hyperparams.stat().st_size
    names = [f"hp.undeclared_{i}".ljust(200, "x") for i in range(250)]
    for step in range(2, 6):  # 250 names of 200 characters: 50 kB more in the file, each time, if they were kept
        track(dashboard, run_uuid, {"track": {name: {"step": [step], "value": [1.0]} for name in names}, "time": 2.0})
    # The run's own record is written again on each report, with the same values: not a byte more.
    assert hyperparams.stat().st_size == before
    status, _ = dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"learning_rate": 5e-4})
    assert status == 200
    flood = {name: {"step": [6], "value": [2.0]} for name in names}
    assert track(dashboard, run_uuid, {"track": flood, "time": 3.0})["dynamic"] == {"learning_rate": 5e-4}
    track(dashboard, run_uuid, {"track": {**flood, **reports(5e-4, 4.0, 7)["track"]}, "time": 4.0})
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert info["params"]["learning_rate"]["applied"] == 5e-4 and info["params"]["learning_rate"]["sent"] is None
    assert json.loads(hyperparams.read_text())[run_uuid]["reported"] == {"learning_rate": 5e-4, "epochs": 4.0}
