"""Runs side by side: `GET /api/v1/compare` answers what real runs sent (their updates.csv, exactly),
and the comparison page draws one curve per run in Chromium (its query's refusals, a trial's run
and the address that keeps a view: test_compare_query.py).

Two tiny seeds are trained by `experiments.curves --jobs 2 --dashboard URL`, which draws their curves
and prints their comparison page's address (the one test of curves training seeds to their end:
tests/test_curves_runs.py stops them); a probe run takes a live change."""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from browser import CHROMIUM, Chromium
from compare_page import HASHED_COLOURS, click, compare, ema, exported_csv, fnv1a, mouse, point_at, wait
from dashboard_support import REPO, RUN_LIMIT_S, Dashboard, ProbeRun, Process, child_env

from experiments.run.games_csv import read_games
from experiments.run.updates_csv import read_updates
from tests.conftest import wait_until_no_processes
from tests.curves_support import assert_plot_drawn
from tests.zygote import MARK

# A dashboard of this module's own (tests/dashboard/conftest.py): its runs list is clicked through in a
# browser, where other modules' runs would push its rows off the screen.
FRESH_DASHBOARD = True

# 2 games × 32 steps = 64 agent steps an update, 5 updates; short games give a score early.
TINY = ["--backend", "serial", "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "32",
        "--minibatches", "2", "--epochs", "1", "--max-episode-frames", "200"]
PAGE_LIMIT_S = 60.0


@pytest.fixture(scope="module")
def seeds(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Seeds 1 and 2, trained at once by curves, reporting to the module's dashboard; curves draws
    them too (its out folder is `out`). Its processes carry a marker of their own, so that what is
    left of them once it has ended is found (`left`)."""
    out = tmp_path_factory.mktemp("curves")
    marker = uuid4().hex
    curves = Process([sys.executable, "-m", "experiments.curves", "--seeds", "1", "2", "--jobs", "2",
                      "--total-env-steps", "320", "--budget", "320", "--grid", "64", "--window", "5", "--budgets", "256", "320",
                      "--out", str(out), *TINY, "--dashboard", dashboard.url], cwd=REPO, env={**child_env(), MARK: marker})
    assert curves.wait() == 0, curves.output[-3000:]
    dirs = [next((out / "runs" / "project" / f"seed{seed}" / "project").iterdir()) for seed in (1, 2)]
    return {"output": curves.lines, "dirs": dirs, "uuids": [d.name for d in dirs], "out": out,
            "left": wait_until_no_processes(marker)}


@pytest.fixture(scope="module")
def tweaked_probe(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A probe run (loss = exp(-step / 10) at steps 0, 1, …) whose learning rate was changed live."""
    probe = ProbeRun(tmp_path_factory.mktemp("probe"), f"{dashboard.url}/api/v1/default", "2000",
                     "--until", "learning_rate=0.001")
    try:
        run_uuid = probe.run_uuid()
        deadline = time.monotonic() + RUN_LIMIT_S
        while not dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")[1].get("params"):
            assert time.monotonic() < deadline, "the probe's configs never reached the dashboard"
            time.sleep(0.2)
        assert dashboard.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"learning_rate": 1e-3})[0] == 200
        assert probe.wait() == 0, probe.output
    finally:
        probe.kill()
    assert "FINISHED" in probe.output, probe.output  # exited 0: labml's sender delivered everything
    steps = sum(1 for line in probe.lines if "STEP step=" in line)
    return {"uuid": run_uuid, "steps": steps}


@pytest.mark.slow
def test_curves_trains_seeds_draws_them_and_prints_their_comparison_page(dashboard: Dashboard, seeds: dict[str, Any]) -> None:
    out = seeds["out"]
    rows = list(csv.DictReader((out / "curves.csv").open()))
    assert {r["label"] for r in rows} == {"project"}
    assert [int(r["env_step"]) for r in rows] == sorted(int(r["env_step"]) for r in rows)
    assert all(float(r["min"]) <= float(r["mean"]) <= float(r["max"]) for r in rows)
    assert max(int(r["seeds"]) for r in rows) == 2 and int(rows[-1]["env_step"]) == 320  # each seed to its budget
    table = (out / "table.md").read_text()
    assert "| 256 |" in table and "| 320 |" in table and seeds["output"][0].startswith("curves: project seed 1")
    assert_plot_drawn(out / "curves.png")
    assert seeds["left"] == []  # curves and its runs are gone, none left behind
    a, b = seeds["uuids"]
    assert seeds["output"][-1] == f"curves: compare the 2 runs on the dashboard: {dashboard.url}/compare?runs={a},{b}"


@pytest.mark.slow
def test_the_answer_is_what_the_runs_sent(dashboard: Dashboard, seeds: dict[str, Any]) -> None:
    status, first = compare(dashboard, seeds["uuids"])
    assert status == 200, first
    assert first["metric"] == "score_mean_100" and first["metrics"][0] == "score_mean_100"  # the score first
    columns = [m for m in first["metrics"] if m in read_updates(seeds["dirs"][0] / "updates.csv")[0]]
    assert {"score_mean_100", "entropy", "policy_loss", "learning_rate", "value_loss"} <= set(columns)
    for metric in columns:
        status, answer = compare(dashboard, seeds["uuids"], metric)
        assert status == 200 and answer["metric"] == metric and list(answer["runs"]) == seeds["uuids"]
        for seed, run_dir in enumerate(seeds["dirs"], 1):
            rows = read_updates(run_dir / "updates.csv")
            assert [row["env_step"] for row in rows] == [64, 128, 192, 256, 320]
            sent = [(row["env_step"], row[metric]) for row in rows if row[metric] is not None]
            run = answer["runs"][run_dir.name]
            assert list(zip(run["steps"], run["values"], strict=True)) == sent, metric  # exactly, every update once
            assert (run["name"], run["seed"], run["live"], run["status"]) == ("Breakout · project", seed, {}, "completed")
            summary = json.loads((run_dir / "summary.json").read_text())
            # Training time: each update's steps over its steps per second, summed, so at most the leg's wall time.
            assert len(run["seconds"]) == len(run["steps"]) and 0 < run["seconds"][-1] <= summary["wall_time_s"]
            assert run["seconds"] == sorted(run["seconds"]) and abs(run["start_time"] - time.time()) < 3600
            # The wall clock, as the dashboard noted the points arriving: from the run's start, in order.
            wall = run["wall_seconds"]
            assert len(wall) == len(run["steps"]) and None not in wall and wall == sorted(wall) and wall[0] >= 0
            assert wall[-1] <= time.time() - run["start_time"] and run["comment"] == ""


@pytest.mark.slow
def test_a_live_change_is_listed_with_the_run(dashboard: Dashboard, seeds: dict[str, Any],
                                              tweaked_probe: dict[str, Any]) -> None:
    probe = tweaked_probe["uuid"]
    status, answer = compare(dashboard, [probe, *seeds["uuids"]], "loss")
    assert status == 200, answer
    run = answer["runs"][probe]
    assert run["steps"] == list(range(tweaked_probe["steps"]))
    assert run["values"] == [math.exp(-step / 10) for step in run["steps"]]
    assert (run["name"], run["seed"]) == ("probe", None)  # its configs have no seed
    assert run["live"] == {"learning_rate": {"start": 2.5e-4, "now": 1e-3}}
    for uuid in seeds["uuids"]:  # the trainer records no "loss": no curve, no error
        assert answer["runs"][uuid]["steps"] == answer["runs"][uuid]["values"] == []


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_runs_ticked_in_the_list_are_drawn_side_by_side(dashboard: Dashboard, seeds: dict[str, Any], tmp_path: Path,
                                                        no_leftover_processes: None, chromium: Chromium) -> None:
    a, b = seeds["uuids"]
    with chromium.tab(height=1200) as browser:
        browser.load(f"{dashboard.url}/runs")
        assert browser.wait_until(f"document.querySelector('input[data-run=\"{b}\"]') !== null", PAGE_LIMIT_S)
        # Runs of one command share a name: the list tells them apart by short uuid and seed.
        listed = sorted(t for t in browser.evaluate("[...document.querySelectorAll('.list-item h6')].map(h => h.textContent)")
                        if t.startswith((a[:8], b[:8])))  # the module's probe runs are listed too
        assert listed == sorted([f"{a[:8]} · seed 1", f"{b[:8]} · seed 2"]), listed
        for run in (a, b):
            click(browser, f'input[data-run="{run}"]')
        assert browser.wait_until("document.getElementById('dashboard-compare-button').textContent === 'Compare 2 runs'",
                                  PAGE_LIMIT_S)
        assert browser.evaluate("location.pathname") == "/runs"  # a tick does not open the run
        click(browser, "#dashboard-compare-button")
        assert wait(browser, "location.pathname === '/compare' && document.body.dataset.loaded === 'yes'"), \
            browser.evaluate("document.body.innerText")
        assert browser.evaluate("location.pathname + location.search") == f"/compare?runs={a},{b}"
        click(browser, 'input[value="entropy"]')  # a second metric: its own chart and column
        assert browser.wait_until("document.querySelectorAll('.compare-chart').length === 2", PAGE_LIMIT_S)
        page = browser.evaluate("""(() => ({
            address: location.search,
            curves: Object.fromEntries([...document.querySelectorAll('.compare-chart')].map(c =>
                [c.dataset.metric, [...c.querySelectorAll('.curve')].map(p => p.dataset.run)])),
            rows: [...document.querySelectorAll('#runs-body tr')].map(tr => ({
                run: tr.dataset.run, name: tr.querySelector('.run-name a').textContent,
                seed: tr.querySelector('.seed').textContent, live: tr.querySelector('.live').textContent,
                last: Object.fromEntries([...tr.querySelectorAll('td.last')].map(td =>
                    [td.dataset.metric, td.dataset.value === undefined ? null : Number(td.dataset.value)]))})),
        }))()""")
        browser.screenshot(tmp_path / "compare.png")
    assert page["address"] == f"?runs={a},{b}&metrics=score_mean_100,entropy"
    scored = [d.name for d in seeds["dirs"] if any(r["score_mean_100"] is not None for r in read_updates(d / "updates.csv"))]
    assert page["curves"] == {"score_mean_100": scored, "entropy": [a, b]}  # one curve per run that recorded it
    for row, seed, run_dir in zip(page["rows"], (1, 2), seeds["dirs"], strict=True):
        last = read_updates(run_dir / "updates.csv")[-1]
        assert row == {"run": run_dir.name, "name": "Breakout · project", "seed": str(seed), "live": "—",
                       "last": {metric: last[metric] for metric in ("score_mean_100", "entropy")}}


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_the_charts_answer_a_cursor_smoothing_a_zoom_the_time_axis_and_export(
        dashboard: Dashboard, seeds: dict[str, Any], tmp_path: Path, no_leftover_processes: None,
        chromium: Chromium) -> None:
    a, b = seeds["uuids"]
    entropy = {uuid: compare(dashboard, seeds["uuids"], "entropy")[1]["runs"][uuid] for uuid in (a, b)}
    with chromium.tab(height=1200) as browser:
        browser.load(f"{dashboard.url}/compare?runs={a},{b}&metrics=score_mean_100,entropy")
        assert browser.wait_until("document.body.dataset.loaded === 'yes' && document.querySelectorAll("
                                  "'a.export-png[data-ready]').length === 2", PAGE_LIMIT_S)
        # The score's first point is explained where it is drawn: beside the chart, and at the cursor.
        note = browser.evaluate("document.querySelector('.compare-chart[data-metric=\"score_mean_100\"] .chart-note').textContent")
        assert "the first games to end are the shortest: a start at 0 is real" in note, note
        x, y = point_at(browser, "score_mean_100", b, 0)
        mouse(browser, "mouseMoved", x, y)
        first = browser.evaluate(f"document.querySelector('.compare-chart[data-metric=\"score_mean_100\"] .tip-run[data-run=\"{b}\"]').textContent")
        assert first.endswith("(the first games to end: the shortest, often 0 points)"), first
        assert browser.evaluate("document.querySelector('.compare-chart[data-metric=\"entropy\"] .chart-note')") is None
        # The cursor: a line at the nearest step, each run's value there, and the step.
        x, y = point_at(browser, "entropy", a, 2)
        mouse(browser, "mouseMoved", x + 3, y)
        tip = browser.evaluate("(() => { const t = document.querySelector('.compare-chart[data-metric=\"entropy\"] .chart-tip');"
                               " return {hidden: t.hidden, x: t.querySelector('.tip-x').textContent,"
                               " runs: [...t.querySelectorAll('.tip-run')].map(r => [r.dataset.run, Number(r.dataset.value)]),"
                               " line: document.querySelector('.compare-chart[data-metric=\"entropy\"] .cursor')"
                               ".getAttribute('visibility')}; })()")
        assert tip == {"hidden": False, "x": "agent steps 192", "line": "visible",
                       "runs": [[a, entropy[a]["values"][2]], [b, entropy[b]["values"][2]]]}
        browser.screenshot(tmp_path / "cursor.png")
        # Zoom: a drag across steps 128 to 256, then the reset.
        (x0, y0), (x1, _) = point_at(browser, "entropy", a, 1), point_at(browser, "entropy", a, 3)
        mouse(browser, "mousePressed", x0 - 4, y0)
        mouse(browser, "mouseMoved", (x0 + x1) / 2, y0)
        mouse(browser, "mouseMoved", x1 + 4, y0)
        mouse(browser, "mouseReleased", x1 + 4, y0)
        assert browser.wait_until("!document.getElementById('zoom-reset').disabled", PAGE_LIMIT_S)
        assert sorted({int(r["step"]) for r in exported_csv(browser, "entropy")}) == [128, 192, 256]
        click(browser, "#zoom-reset")
        assert browser.wait_until("document.getElementById('zoom-reset').disabled", PAGE_LIMIT_S)
        rows = exported_csv(browser, "entropy")
        assert [(r["run_uuid"], int(r["step"]), float(r["value"]), float(r["training_seconds"])) for r in rows] == [
            (uuid, step, value, seconds) for uuid in (a, b)
            for step, value, seconds in zip(entropy[uuid]["steps"], entropy[uuid]["values"], entropy[uuid]["seconds"], strict=True)]
        link = "document.querySelector('.compare-chart[data-metric=\"entropy\"] a.export-png')"
        # The PNG is drawn from the chart's SVG through an image that loads on its own time: wait for it.
        assert browser.wait_until(f"{link}.href.startsWith('data:image/png')", PAGE_LIMIT_S)
        png = browser.evaluate(f"{link}.href")
        width = browser.evaluate("document.querySelector('.compare-chart[data-metric=\"entropy\"] svg').getAttribute('width')")
        image = base64.b64decode(png.split(",", 1)[1])
        assert png.startswith("data:image/png;base64,") and image[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(image[16:20], "big") == int(width)  # the chart, at its size on the page
        # It reads alone: a title above, the metric's name by its axis, a legend of each run below.
        picture = browser.evaluate("(() => { const f = document.querySelector('.compare-chart[data-metric=\"entropy\"]');"
                                   " const e = f.exported; return {title: e.querySelector('.title').textContent,"
                                   " y: e.querySelector('.y-label').textContent, height: Number(e.getAttribute('height')),"
                                   " chart: Number(f.querySelector('.chart-box svg').getAttribute('height')),"
                                   " legend: [...e.querySelectorAll('.legend')].map(t => [t.dataset.run, t.textContent])}; })()")
        assert int.from_bytes(image[20:24], "big") == picture["height"] > picture["chart"]
        assert picture["title"] == "entropy by agent steps" and picture["y"] == "entropy"
        assert picture["legend"] == [[a, f"Breakout · project {a[:8]} · seed 1"], [b, f"Breakout · project {b[:8]} · seed 2"]]
        # Smoothing: a key press on the slider; the raw curve stays, faint, and the cursor gives the smoothed value.
        click(browser, "#smoothing")
        browser.evaluate("document.getElementById('smoothing').value = '0.5';"
                         " document.getElementById('smoothing').dispatchEvent(new Event('input'))")
        browser.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": "ArrowRight", "code": "ArrowRight",
                                                "windowsVirtualKeyCode": 39})
        browser.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": "ArrowRight", "code": "ArrowRight",
                                                "windowsVirtualKeyCode": 39})
        assert browser.wait_until("location.search.includes('smooth=0.51')", PAGE_LIMIT_S), browser.evaluate("location.search")
        raw = browser.evaluate("[...document.querySelectorAll('.compare-chart[data-metric=\"entropy\"] .raw')]"
                               ".map(p => [p.dataset.run, p.getAttribute('stroke-opacity')])")
        assert raw == [[a, "0.25"], [b, "0.25"]]
        x, y = point_at(browser, "entropy", b, 4)
        mouse(browser, "mouseMoved", x, y)
        smoothed = browser.evaluate("[...document.querySelectorAll('.compare-chart[data-metric=\"entropy\"] .tip-run')]"
                                    ".map(r => Number(r.dataset.value))")
        assert smoothed == pytest.approx([ema(entropy[uuid]["values"], 0.51)[4] for uuid in (a, b)], rel=1e-12)
        # The x axis in training time.
        browser.evaluate("const s = document.getElementById('x-axis'); s.value = 'time'; s.dispatchEvent(new Event('change'))")
        assert browser.wait_until("document.querySelector('.compare-chart figcaption').textContent"
                                  ".startsWith('score_mean_100 by training time')", PAGE_LIMIT_S)
        ticks = browser.evaluate("[...document.querySelectorAll('.compare-chart[data-metric=\"entropy\"] text.tick')]"
                                 ".map(t => t.textContent)")
        assert browser.evaluate("location.search").endswith("&smooth=0.51&x=time")
        browser.screenshot(tmp_path / "time.png")
    assert "training time" in ticks and any(re.fullmatch(r"0:\d\d", t) for t in ticks), ticks


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_runs_keep_their_colours_say_when_and_how_they_ran_and_scores_start_at_a_game(
        dashboard: Dashboard, seeds: dict[str, Any], no_leftover_processes: None, chromium: Chromium) -> None:
    a, b = seeds["uuids"]
    shown = {}
    with chromium.tab(height=1200) as browser:
        for order in ([a, b], [b, a], [b]):
            browser.load(f"{dashboard.url}/compare?runs={','.join(order)}")
            assert wait(browser, f"document.body.dataset.loaded === 'yes' && document.querySelectorAll('#runs-body tr')"
                                 f".length === {len(order)} && document.querySelectorAll('.pick-run').length >= 2")
            shown[tuple(order)] = browser.evaluate("""(() => ({
                swatches: Object.fromEntries([...document.querySelectorAll('#runs-body tr')].map(tr =>
                    [tr.dataset.run, tr.querySelector('.swatch').style.background])),
                curves: Object.fromEntries([...document.querySelectorAll('.curve')].map(p => [p.dataset.run, p.getAttribute('stroke')])),
                rows: [...document.querySelectorAll('#runs-body tr')].map(tr => [tr.querySelector('.run-status').textContent,
                    tr.querySelector('.run-started').textContent]),
                picker: [...document.querySelectorAll('.pick-run')].map(l => l.textContent)}))()""")
        csv_rows = exported_csv(browser, "score_mean_100")
    # A run's colour is its uuid's hash, on any page; of two runs that hash alike, the later in uuid
    # order takes the next colour of the ten (so b beside a can differ from b alone: about 1 pair in 10).
    first, second = sorted((a, b))
    slot = {uuid: fnv1a(uuid) % 10 for uuid in (a, b)}
    second_slot = (slot[second] + 1) % 10 if slot[second] == slot[first] else slot[second]
    assert shown[(a, b)]["curves"] == shown[(b, a)]["curves"] == {first: HASHED_COLOURS[slot[first]],
                                                                  second: HASHED_COLOURS[second_slot]}
    assert shown[(b,)]["curves"] == {b: HASHED_COLOURS[slot[b]]}
    for uuid, run_dir in zip((a, b), seeds["dirs"], strict=True):
        start = compare(dashboard, [uuid])[1]["runs"][uuid]["start_time"]
        assert ["completed", datetime.fromtimestamp(start).strftime("%Y-%m-%d %H:%M")] in shown[(a, b)]["rows"]
        seed = seeds["dirs"].index(run_dir) + 1
        assert any(text.startswith(f" Breakout · project {uuid[:8]} · seed {seed} · completed · started ") for text in shown[(a, b)]["picker"])
    # No score before a game ended: the first point is at the end of the update in which the first game ended.
    games = read_games(seeds["dirs"][1] / "games.csv")
    assert int(csv_rows[0]["step"]) == 64 * games[0].update and games[0].env_step <= int(csv_rows[0]["step"])


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 390])
def test_the_comparison_fits_the_width_with_readable_labels(dashboard: Dashboard, seeds: dict[str, Any], width: int,
                                                            tmp_path: Path, no_leftover_processes: None,
                                                            chromium: Chromium) -> None:
    a, b = seeds["uuids"]
    with chromium.tab(width=width, height=1000) as browser:
        browser.load(f"{dashboard.url}/compare?runs={a},{b}&metrics=score_mean_100,entropy")
        assert browser.wait_until("document.body.dataset.loaded === 'yes'", PAGE_LIMIT_S)
        page = browser.evaluate("""(() => {
            const svg = document.querySelector('.compare-chart svg');
            return {wide: document.scrollingElement.scrollWidth, inner: innerWidth, client: document.documentElement.clientWidth,
                scrollbar: innerWidth - document.documentElement.clientWidth,
                drawn: svg.getBoundingClientRect().width, width: Number(svg.getAttribute('width')),
                label: Math.min(...[...svg.querySelectorAll('text.tick')].map(t => t.getBoundingClientRect().height)),
                cells: [...document.querySelectorAll('#runs-body td')].every(td =>
                    td.getBoundingClientRect().right <= document.documentElement.clientWidth)}; })()""")
        browser.screenshot(tmp_path / f"compare-{width}.png")
    # Against the width left beside a classic scrollbar, which takes room here (15 px), not the window's.
    assert page["scrollbar"] > 0 and page["wide"] <= page["client"] and page["inner"] == width and page["cells"], page
    assert page["drawn"] == page["width"] and page["label"] >= 12, page  # drawn at its size: 12 px labels stay 12 px
