"""The real trainer (`python -m experiments.breakout --dashboard URL`) against the real dashboard."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser
from dashboard_support import REPO, Dashboard, Process, run_tool
from test_browser import SCREENSHOT_ENV
from test_live_run import series_of


def test_training_run_reaches_dashboard_and_takes_a_live_change(dashboard: Dashboard, tmp_path: Path) -> None:
    # A run long enough never to end by itself: it is stopped (SIGTERM, as a user would) once the
    # dashboard holds a metric taken with the changed value, whatever the machine's load.
    run = Process([sys.executable, "-m", "experiments.breakout", "--updates", "100000", "--n-workers", "2",
                   "--worker-steps", "16", "--minibatches", "2", "--epochs", "1", "--anneal-learning-rate", "false",
                   "--data-dir", str(tmp_path), "--dashboard", dashboard.url], cwd=REPO)
    try:
        line = run.wait_for_line(lambda text: "Monitor experiment at" in text)
        run_uuid = re.search(r"/run/([0-9a-f]{32})", line).group(1)

        tweak = run_tool("experiments.tweak", run_uuid, "learning_rate=1e-3", "--dashboard", dashboard.url)
        assert tweak.returncode == 0, tweak.stderr
        # The trainer applies it at its next update and says so on its console.
        run.wait_for_line(lambda text: "Dynamic hyper parameter changed" in text and "learning_rate" in text)
        deadline = time.monotonic() + 600  # a cap: the loop ends as soon as the metric is there
        while time.monotonic() < deadline and run.proc.poll() is None:
            _, metrics = dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})
            names = {s["name"] for s in metrics.get("series", [])}
            if "learning_rate" in names and abs(series_of(metrics, "learning_rate")["value"][-1] - 1e-3) < 1e-9:
                break
            time.sleep(0.5)
        os.kill(run.proc.pid, signal.SIGTERM)
        assert run.wait() == 128 + signal.SIGTERM, run.output[-3000:]
    finally:
        run.kill()

    summary = json.loads((tmp_path / "breakout" / run_uuid / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["updates"] >= 1

    status, info = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    assert status == 200 and info["name"] == "breakout"
    configs = {c["key"]: c for c in info["configs"]}
    assert configs["n_workers"]["computed"] == 2 and configs["clip_range"]["computed"]["type"] == "DynamicSchedule"

    deadline = time.monotonic() + 300  # a cap: the loop ends as soon as the packets are there
    while True:  # labml delivers the last packets as the run exits
        status, metrics = dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})
        names = {s["name"] for s in metrics.get("series", [])}
        if {"policy_loss", "value_loss", "learning_rate"} <= names or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {"policy_loss", "value_loss", "entropy", "learning_rate", "sps"} <= names, names
    lr = series_of(metrics, "learning_rate")["value"]
    # The live change replaced the (here un-annealed) base learning rate mid-run.
    assert abs(lr[0] - 2.5e-4) < 1e-9 and abs(lr[-1] - 1e-3) < 1e-9, lr
    if summary["games"]:
        assert "score_mean_100" in names

    if not CHROMIUM.exists():
        return  # the browser half is covered (and reported as skipped) by test_browser.py
    # What a person sees: the Breakout run's page draws its charts (this PNG is the README's).
    with Browser(tmp_path / "chromium-profile") as browser:
        browser.load(f"{dashboard.url}/run/{run_uuid}")
        drawn = browser.wait_until("document.body.innerText.includes('breakout')"
                                   " && document.querySelectorAll('.labml-card svg path').length > 0", 60)
        screenshot = tmp_path / "breakout-run.png"
        browser.screenshot(screenshot)
    assert drawn, "the Breakout run page never drew its charts"
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copy(screenshot, os.environ[SCREENSHOT_ENV])


@pytest.mark.slow
def test_training_is_not_held_up_by_an_unreachable_dashboard(tmp_path: Path) -> None:
    from dashboard_support import free_port

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    run = Process([sys.executable, "-m", "experiments.breakout", "--updates", "2", "--n-workers", "2",
                   "--worker-steps", "16", "--data-dir", str(tmp_path), "--dashboard", closed], cwd=REPO)
    try:
        code = run.wait(150)
    finally:
        run.kill()
    assert code == 0, run.output[-3000:]
    assert time.monotonic() - started < 120  # training + at most 30 s waiting for labml's sender
    assert "the dashboard did not take the run's last updates within 30 s" in run.output
    assert run.output.rstrip().endswith("summary.json")
