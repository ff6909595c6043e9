"""What a comparison's address asks and answers beyond the seeds of test_compare.py: a bad query
refused in one line, the page served whole from the dashboard, a sweep trial's run named by its
trial everywhere the page names a run, its points on the wall clock, and the page's choices (the
zoom, the axis) kept in its address so that a link opens the same view."""

from __future__ import annotations

import math
import re
import time
from typing import Any

import pytest
from browser import CHROMIUM, Chromium
from compare_page import PAGE_LIMIT_S, click, compare, exported_csv, mouse, point_at, wait
from dashboard_support import Dashboard, ProbeRun

TRIAL = "probe-sweep trial 2"  # labml's comment, as a sweep names a trial's run


@pytest.fixture(scope="module")
def trial_probe(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A probe run named as a sweep's trial: 25 steps, 0.1 s apart, sent to its end."""
    probe = ProbeRun(tmp_path_factory.mktemp("trial"), f"{dashboard.url}/api/v1/default", "25", "--comment", TRIAL)
    try:
        run_uuid = probe.run_uuid()
        assert probe.wait() == 0, probe.output
    finally:
        probe.kill()
    return {"uuid": run_uuid, "ended": time.time()}


GOOD = "0" * 32


@pytest.mark.parametrize(("query", "status", "message"), [
    ("", 400, "query parameter runs is missing; expected runs=UUID,UUID[,…] (1 to 16 runs)"),
    ("runs=", 400, "query parameter runs is missing; expected runs=UUID,UUID[,…] (1 to 16 runs)"),
    ("runs=" + ",".join(f"{i:032x}" for i in range(17)), 400, "query parameter runs: 17 runs; expected 1 to 16"),
    ("runs=a,,b", 400, "query parameter runs: '' is not a run UUID; expected 1-64 letters, digits, \"_\" or \"-\", "
                       "separated by commas"),
    ("runs=../etc", 400, "query parameter runs: '../etc' is not a run UUID; expected 1-64 letters, digits, \"_\" or "
                         '"-", separated by commas'),
    (f"runs={GOOD}", 404, f"query parameter runs: unknown run {GOOD}"),
    ("runs=RUN,RUN", 400, "query parameter runs: RUN is listed 2 times; expected each run once"),
    ("runs=RUN&metric=nope", 404, "unknown metric 'nope': none of these runs recorded it (they recorded: loss)"),
    ("runs=RUN&metric=" + "m" * 201, 400, "query parameter metric='" + "m" * 40 + "': expected a metric name of 1 to "
                                          "200 characters"),
    ("runs=RUN&metric=", 400, "query parameter metric='': expected a metric name of 1 to 200 characters"),
    ("runs=RUN&metric=loss&metric=loss", 400, "query parameter metric is given 2 times; expected it once"),
    ("runs=RUN&run=RUN", 400, "query parameter 'run': unknown; expected runs=UUID,UUID[,…] and metric=NAME"),
])
@pytest.mark.slow
def test_a_bad_query_is_one_line_4xx(dashboard: Dashboard, finished_run: str, query: str, status: int,
                                     message: str) -> None:
    got, answer = dashboard.request("GET", f"/api/v1/compare?{query.replace('RUN', finished_run)}")
    assert (got, answer) == (status, {"error": message.replace("RUN", finished_run)})


def test_the_page_needs_nothing_from_outside(dashboard: Dashboard) -> None:
    status, page = dashboard.request("GET", "/compare?runs=a,b&metrics=entropy")
    assert status == 200 and '<script src="/_dashboard/compare.js" defer></script>' in page
    assert "/_vendor/bootstrap-5.0.0-beta2/dist/css/bootstrap.min.css" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # every library local: the dashboard works offline
    for name in ("compare.js", "compare-chart.js", "compare.css", "compare-pick.js"):
        assert dashboard.request("GET", f"/_dashboard/{name}")[0] == 200


@pytest.mark.slow
def test_a_trial_is_named_and_its_points_have_a_wall_clock(dashboard: Dashboard, trial_probe: dict[str, Any]) -> None:
    status, answer = compare(dashboard, [trial_probe["uuid"]], "loss")
    assert status == 200, answer
    run = answer["runs"][trial_probe["uuid"]]
    assert run["comment"] == TRIAL and run["steps"] == list(range(25)) and answer["score"] == "score_mean_100"
    wall = run["wall_seconds"]
    # 24 sleeps of 0.1 s lie between the first step and the last: at least 2.4 s of wall clock.
    assert None not in wall and wall == sorted(wall) and wall[0] >= 0 and wall[-1] >= 2.4
    assert wall[-1] <= trial_probe["ended"] - run["start_time"]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_a_trial_is_named_a_zoom_is_kept_in_the_address_and_the_wall_clock_is_an_axis(
        dashboard: Dashboard, trial_probe: dict[str, Any], no_leftover_processes: None, chromium: Chromium) -> None:
    run = trial_probe["uuid"]
    sent = compare(dashboard, [run], "loss")[1]["runs"][run]
    chart = '.compare-chart[data-metric="loss"]'
    with chromium.tab(height=1000) as browser:
        browser.load(f"{dashboard.url}/compare?runs={run}&metrics=loss")
        assert browser.wait_until("document.body.dataset.loaded === 'yes'", PAGE_LIMIT_S)
        # The trial in the table, the cursor box and the CSV.
        assert browser.evaluate(f"document.querySelector('#runs-body tr[data-run=\"{run}\"] td.trial').textContent") == TRIAL
        x, y = point_at(browser, "loss", run, 5)
        mouse(browser, "mouseMoved", x, y)
        tip = browser.evaluate(f"document.querySelector('{chart} .tip-run').textContent")
        assert tip == f"probe {run[:8]} · {TRIAL}: {float(f'{math.exp(-0.5):.4g}')}", tip
        rows = exported_csv(browser, "loss")
        assert [(r["name"], r["seed"], r["trial"], int(r["step"]), r["training_seconds"]) for r in rows] == [
            ("probe", "", TRIAL, step, "") for step in range(25)]  # no seed, no steps per second: empty cells
        assert [float(r["wall_seconds"]) for r in rows] == sent["wall_seconds"]
        # A zoom is kept in the address: the same view from a link.
        (x0, y0), (x1, _) = point_at(browser, "loss", run, 10), point_at(browser, "loss", run, 20)
        for kind, at in (("mousePressed", x0), ("mouseMoved", (x0 + x1) / 2), ("mouseMoved", x1), ("mouseReleased", x1)):
            mouse(browser, kind, at, y0)
        assert browser.wait_until("location.search.includes('&zoom=')", PAGE_LIMIT_S)
        address = browser.evaluate("location.href")
        zoom = [float(v) for v in address.split("zoom=", 1)[1].split("&")[0].split(",")]
        browser.load(address)
        assert wait(browser, "document.body.dataset.loaded === 'yes'")
        assert not browser.evaluate("document.getElementById('zoom-reset').disabled")
        kept = [int(r["step"]) for r in exported_csv(browser, "loss")]
        assert kept == [step for step in range(25) if zoom[0] <= step <= zoom[1]] and kept[0] >= 10 and kept[-1] <= 20
        click(browser, "#zoom-reset")
        assert browser.wait_until("!location.search.includes('zoom=')", PAGE_LIMIT_S)
        # The wall clock since the run started, as an axis of its own.
        browser.evaluate("const s = document.getElementById('x-axis'); s.value = 'wall'; s.dispatchEvent(new Event('change'))")
        assert browser.wait_until(f"document.querySelector('{chart} figcaption').textContent.startsWith('loss by wall-clock time')",
                                  PAGE_LIMIT_S)
        assert browser.evaluate("location.search") == f"?runs={run}&metrics=loss&x=wall"
        ticks = browser.evaluate(f"[...document.querySelectorAll('{chart} text.tick')].map(t => t.textContent)")
        points = browser.evaluate(f"document.querySelector('{chart} .curve').getAttribute('points').split(' ').length")
    assert "wall-clock time" in ticks and any(re.fullmatch(r"0:\d\d", t) for t in ticks), ticks
    assert points == 25
