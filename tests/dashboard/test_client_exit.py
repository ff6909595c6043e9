"""A labml run whose dashboard is gone still exits soon after its bounded wait for labml's sender
(experiments/run/labml/sender.py, `finish_sending`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_support import Dashboard, ProbeRun, free_port

# The probe gives labml's sender this long; labml itself would retry forever. With no dashboard
# to deliver to, no timeout could be long enough: the least one (1 s) proves the give-up as well.
FINISH_TIMEOUT_S = "1"


def test_exits_when_the_dashboard_was_never_there(tmp_path: Path, no_leftover_processes: None) -> None:
    closed = free_port()  # nothing listens here
    probe = ProbeRun(tmp_path, f"http://127.0.0.1:{closed}/api/v1/default", "5",
                     "--finish-timeout", FINISH_TIMEOUT_S)
    try:
        # wait() fails the test if the process is still there after RUN_LIMIT_S.
        assert probe.wait() == 0, probe.output
    finally:
        probe.kill()
    assert "FINISHED delivered=False" in probe.output
    assert f"did not take the last updates within {FINISH_TIMEOUT_S} s" in probe.output


@pytest.mark.slow
def test_exits_when_the_dashboard_dies_mid_run(tmp_path: Path, no_leftover_processes: None) -> None:
    dashboard = Dashboard(tmp_path / "data")
    probe = None
    try:
        dashboard.wait_ready()
        probe = ProbeRun(tmp_path / "probe", f"{dashboard.url}/api/v1/default", "60",
                         "--finish-timeout", FINISH_TIMEOUT_S)
        probe.wait_for_line(lambda line: "Monitor experiment at" in line)  # first update delivered
        dashboard.kill()
        assert probe.wait() == 0, probe.output
    finally:
        dashboard.kill()
        if probe is not None:
            probe.kill()
    assert "FINISHED delivered=False" in probe.output


def test_reports_success_when_everything_was_delivered(dashboard: Dashboard, tmp_path: Path) -> None:
    probe = ProbeRun(tmp_path, f"{dashboard.url}/api/v1/default", "3", "--finish-timeout", "60")
    try:
        assert probe.wait() == 0, probe.output
    finally:
        probe.kill()
    assert "FINISHED delivered=True" in probe.output
    assert "warning:" not in probe.output
