"""Fixtures: a dashboard (one per pytest process, or the module's own), a finished probe run, a
process-leak check, and one Chromium for the session's browser tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest
from browser import Chromium
from dashboard_support import Dashboard, finished_probe_run, marked_processes

from tests.forked_run import ZYGOTE
from tests.process_table import descendants

_shared_chromium: list[Chromium] = []


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    """One headless Chromium for the session's browser tests (it takes a second or more to start);
    a test opens its page with `chromium.tab()`, in a browser context of its own."""
    browser = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    _shared_chromium.append(browser)
    try:
        yield browser
    finally:
        _shared_chromium.remove(browser)
        browser.close()


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    """Fails the test if it leaves any process behind (fixtures from outside it excepted, the
    session's Chromium among them: it starts and ends renderers for its tabs as it sees fit)."""
    before = set(descendants(os.getpid())) | marked_processes()
    yield
    chromiums = shared_chromium_processes()
    left = (set(descendants(os.getpid())) | marked_processes()) - before
    left -= chromiums | shared_chromium_processes()  # read before and after: a renderer may come or go meanwhile
    left -= {ZYGOTE.pid()}  # started by the test's first run, it serves the session's runs
    assert not left, f"processes left behind: {described(left)}"


def shared_chromium_processes() -> set[int]:
    return set().union(*(shared.processes() for shared in _shared_chromium))


def described(pids: set[int]) -> list[str]:
    found = []
    for pid in sorted(pids):
        try:
            found.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())[:200]}")
        except psutil.Error:
            found.append(f"{pid} (gone)")
    return found


@pytest.fixture(scope="session")
def shared_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """One dashboard for every test module of this pytest process (each xdist worker has its own)
    that only adds runs of its own, under fresh uuids, and reads them back by their uuid."""
    d = Dashboard(tmp_path_factory.mktemp("shared-dashboard-data"))
    try:
        yield d.wait_ready()
    finally:
        d.kill()


@pytest.fixture(scope="module")
def dashboard(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """The worker's shared dashboard, or one of the module's own where the module sets
    FRESH_DASHBOARD: one whose tests need its store to hold their runs alone (a runs list clicked
    through in a browser, a file of the store measured), or attack the server in ways that could
    leave it broken for the modules after them."""
    if not getattr(request.module, "FRESH_DASHBOARD", False):
        shared: Dashboard = request.getfixturevalue("shared_dashboard")
        assert shared.proc.poll() is None, f"the shared dashboard has ended (exit {shared.proc.returncode}):\n{shared.output[-3000:]}"
        yield shared
        return
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
