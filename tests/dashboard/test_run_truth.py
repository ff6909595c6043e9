"""A run's whole history on the dashboard, with a real tiny run in three legs and a real dashboard:
the run joins late (trained without a dashboard, resumed with one) and brings its updates, then,
resumed with the dashboard again, continues the same series without a repeated point; the runs
list says when the run began, the run page's console ends with the run's summary, and the summary
labels the leg's and the run's steps and time apart."""

from __future__ import annotations

import base64
import json
import re
import sys
import uuid
from array import array
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import REPO, Dashboard, Process

from experiments.run.report import earlier_wall_time, summary_line
from experiments.run.updates_csv import read_updates
from tests.conftest import Cli, run_once

pytestmark = pytest.mark.slow
# 2 games × 32 steps = 64 agent steps an update, stepped in the trainer's process (what is checked
# here is what reaches the dashboard, not worker processes); short games give a score within the
# first updates.
TINY = ["--backend", "serial", "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "32",
        "--minibatches", "2", "--epochs", "1",
        "--max-episode-frames", "200", "--updates", "5"]
# The first leg: 3 updates without a dashboard, made once a session (test_tweak_unknown_run.py
# reads a copy of the same run); the next legs resume it with the dashboard to update 4, then 5.
FIRST_LEG = [*TINY, "--stop-after-env-steps", "192"]
STEPS = [64.0, 128.0, 192.0, 256.0, 320.0]


def train(data_dir: Path, *args: str) -> Process:
    run = Process([sys.executable, "-m", "experiments.breakout", *TINY, "--data-dir", str(data_dir), *args], cwd=REPO)
    assert run.wait() == 0, run.output[-3000:]
    return run


def series(dashboard: Dashboard, run_uuid: str) -> dict[str, dict[str, list[float]]]:
    """Every series the dashboard keeps for the run: steps and values (float32, as it sends them)."""
    _, metrics = dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})
    return {s["name"]: {k: list(array("f", base64.b64decode(s[k]))) for k in ("step", "value")}
            for s in metrics["series"]}


def assert_series_match(shown: dict[str, dict[str, list[float]]], rows: list[dict[str, float | None]]) -> None:
    """The dashboard's series are the run's updates.csv: each update once, in order, at its step."""
    for name in ("policy_loss", "value_loss", "entropy", "learning_rate", "score_mean_100"):
        expected = [(row["env_step"], row[name]) for row in rows if row[name] is not None]
        assert shown[name]["step"] == [step for step, _ in expected], name  # each update once, in order
        assert shown[name]["value"] == pytest.approx([value for _, value in expected], rel=1e-6), name


def listed(dashboard: Dashboard, run_uuid: str) -> dict[str, Any]:
    _, runs = dashboard.request("GET", "/api/v1/runs/null")
    return next(r for r in runs["runs"] if r["run_uuid"] == run_uuid)


def uuid_time(run_uuid: str) -> float:
    return (uuid.UUID(hex=run_uuid).time - 0x01B21DD213814000) / 1e7


def console(dashboard: Dashboard, run_uuid: str) -> list[str]:
    """The run page's console (labml sends the run's stderr), line by line."""
    _, logs = dashboard.request("POST", f"/api/v1/logs/stderr/{run_uuid}", {"page": -2})
    text = "".join(logs["pages"][str(i)] for i in range(logs["page_length"]))
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def legs(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run's first leg (3 updates, no dashboard), resumed with the dashboard to its 4th update
    (the late join: what the dashboard held then is kept here), then resumed with it again to its 5th."""
    data_dir = tmp_path_factory.mktemp("runs")
    run_uuid = run_once(Cli(), data_dir, *FIRST_LEG)["run_uuid"]
    run_dir = data_dir / "breakout" / run_uuid
    late = train(data_dir, "--resume", run_uuid, "--stop-after-env-steps", "256", "--dashboard", dashboard.url)
    joined = {"output": late.output, "rows": read_updates(run_dir / "updates.csv"), "series": series(dashboard, run_uuid)}
    last = train(data_dir, "--resume", run_uuid, "--stop-after-env-steps", "none", "--dashboard", dashboard.url)
    return {"run_uuid": run_uuid, "run_dir": run_dir, "joined": joined, "output": last.output,
            "summary": json.loads((run_dir / "summary.json").read_text())}


def test_a_run_that_joins_late_brings_its_history(dashboard: Dashboard, legs: dict[str, Any]) -> None:
    joined = legs["joined"]
    assert "sent the run's history to the dashboard: 3 updates" in joined["output"]
    assert [row["env_step"] for row in joined["rows"]] == STEPS[:4]
    assert_series_match(joined["series"], joined["rows"])
    # The runs list says when the run began (its uuid's time), not when the dashboard first heard of it.
    started = listed(dashboard, legs["run_uuid"])["start_time"]
    assert started == pytest.approx(uuid_time(legs["run_uuid"]), abs=1e-3)


def test_the_end_summary_labels_the_legs_and_the_runs_steps_and_time(legs: dict[str, Any]) -> None:
    summary = legs["summary"]
    assert summary["leg_env_steps"] == 64 and summary["env_steps"] == 320
    assert summary["run_wall_time_s"] > summary["wall_time_s"] > 0
    line = next(line for line in legs["output"].splitlines() if line.startswith("completed: "))
    assert re.fullmatch(r"completed: update 5 of 5 · this leg: 64 agent steps in 0:\d\d:\d\d \(\d+ steps/s, start-up "
                        r"included\) · the run: 320 agent steps in 0:\d\d:\d\d · score .*", line), line


def test_the_run_pages_console_ends_with_the_summary(dashboard: Dashboard, legs: dict[str, Any]) -> None:
    lines = console(dashboard, legs["run_uuid"])
    assert not any("Still updating labml server" in line for line in lines), lines[-5:]
    assert any(line.startswith("completed: update 5 of 5 · this leg") for line in lines), lines[-12:]
    # The last line the run printed: its page's address (labml words it with or without "Monitor experiment at").
    assert lines[-1].strip().endswith(f"{dashboard.url}/run/{legs['run_uuid']}"), lines[-3:]


def test_a_run_resumed_with_the_dashboard_continues_the_same_series(dashboard: Dashboard, legs: dict[str, Any]) -> None:
    # The resume posts the whole history again; the dashboard keeps only the update it lacks.
    assert "sent the run's history to the dashboard: 4 updates" in legs["output"]
    rows = read_updates(legs["run_dir"] / "updates.csv")
    assert [row["env_step"] for row in rows] == STEPS
    assert_series_match(series(dashboard, legs["run_uuid"]), rows)
    assert listed(dashboard, legs["run_uuid"])["start_time"] == pytest.approx(uuid_time(legs["run_uuid"]), abs=1e-3)


def test_one_legs_summary_is_the_runs() -> None:
    one = {"status": "completed", "updates": 5, "env_steps": 320, "leg_env_steps": 320, "wall_time_s": 83.0,
           "run_wall_time_s": 83.0, "sps": 3.9, "score_mean_100": 1.0, "games": 4}
    assert summary_line(one, 5, 100) == ("completed: update 5 of 5 · 320 agent steps in 0:01:23 (4 steps/s, "
                                         "start-up included) · score 1.0 (mean of the last 4 of 4 games)")
    resumed = {**one, "leg_env_steps": 128, "wall_time_s": 59.0, "run_wall_time_s": 3_659.0}
    assert summary_line(resumed, 5, 100) == (
        "completed: update 5 of 5 · this leg: 128 agent steps in 0:00:59 (4 steps/s, start-up included) · "
        "the run: 320 agent steps in 1:00:59 · score 1.0 (mean of the last 4 of 4 games)")


def test_the_earlier_legs_time_comes_from_the_last_summary(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    assert earlier_wall_time(path) == 0.0  # none
    path.write_text(json.dumps({"wall_time_s": 60.0}))  # a leg written before runs kept their whole time
    assert earlier_wall_time(path) == 60.0
    path.write_text(json.dumps({"wall_time_s": 60.0, "run_wall_time_s": 3_600.0}))
    assert earlier_wall_time(path) == 3_600.0
    for broken in ("[1]", "{", '{"run_wall_time_s": "x"}', '{"run_wall_time_s": true}'):
        path.write_text(broken)
        assert earlier_wall_time(path) == 0.0, broken
