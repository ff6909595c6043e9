"""Fixtures: a dashboard per test module, a finished probe run, a process-leak check."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from dashboard_support import Dashboard, finished_probe_run, marked_processes

from tests.process_table import descendants


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    """Fails the test if it leaves any process behind (fixtures from outside it excepted)."""
    before = set(descendants(os.getpid())) | marked_processes()
    yield
    left = (set(descendants(os.getpid())) | marked_processes()) - before
    assert not left, f"processes left behind: {sorted(left)}"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    d = Dashboard(tmp_path_factory.mktemp("dashboard-data"))
    try:
        yield d.wait_ready()
    finally:
        d.kill()


@pytest.fixture(scope="module")
def finished_run(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A short probe run that has sent everything to the module's dashboard."""
    run_uuid, probe = finished_probe_run(dashboard.url, tmp_path_factory.mktemp("probe"), "12")
    assert "FINISHED" in probe.output, probe.output  # exited 0: labml's sender delivered everything
    return run_uuid
