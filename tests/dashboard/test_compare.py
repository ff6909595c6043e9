"""Runs side by side: `GET /api/v1/compare` answers what real runs sent (their updates.csv, exactly),
refuses bad queries with one line, and the comparison page draws one curve per run in Chromium.

Two tiny seeds are trained by `experiments.curves --jobs 2 --dashboard URL` (which prints their
comparison page's address); a probe run takes a live change."""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from browser import CHROMIUM, Browser, Chromium
from dashboard_support import REPO, RUN_LIMIT_S, Dashboard, ProbeRun, Process

from dashboard.client import MAX_COMPARED_RUNS, compare_line
from dashboard.compare import changed_live_values, seed_of
from experiments.run.updates_csv import read_updates
from experiments.seed_runs import dashboard_of
from experiments.sweep import print_comparison

# 2 games × 32 steps = 64 agent steps an update, 5 updates; short games give a score early.
TINY = ["--backend", "serial", "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "32",
        "--minibatches", "2", "--epochs", "1", "--max-episode-frames", "200"]
PAGE_LIMIT_S = 60.0


@pytest.fixture(scope="module")
def seeds(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Seeds 1 and 2, trained at once by curves, reporting to the module's dashboard."""
    out = tmp_path_factory.mktemp("curves")
    curves = Process([sys.executable, "-m", "experiments.curves", "--seeds", "1", "2", "--jobs", "2",
                      "--total-env-steps", "320", "--budget", "320", "--grid", "64", "--budgets", "320",
                      "--out", str(out), *TINY, "--dashboard", dashboard.url], cwd=REPO)
    assert curves.wait() == 0, curves.output[-3000:]
    dirs = [next((out / "runs" / "project" / f"seed{seed}" / "project").iterdir()) for seed in (1, 2)]
    return {"output": curves.lines, "dirs": dirs, "uuids": [d.name for d in dirs]}


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


def compare(dashboard: Dashboard, runs: list[str], metric: str | None = None) -> tuple[int, Any]:
    query = f"runs={','.join(runs)}" + ("" if metric is None else f"&metric={quote(metric)}")
    return dashboard.request("GET", f"/api/v1/compare?{query}")


@pytest.mark.slow
def test_curves_prints_the_comparison_page_of_the_runs_it_trained(dashboard: Dashboard, seeds: dict[str, Any]) -> None:
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
            assert (run["name"], run["seed"], run["live"]) == ("Breakout · project", seed, {})


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


def test_the_printed_address_leaves_credentials_out_and_caps_the_runs() -> None:
    uuids = [f"{i:032x}" for i in range(20)]
    line = compare_line("http://user:secret@127.0.0.1:5005/api/v1/default", uuids, "trials")
    assert line == (f"compare the first {MAX_COMPARED_RUNS} of 20 trials on the dashboard: "
                    f"http://127.0.0.1:5005/compare?runs={','.join(uuids[:MAX_COMPARED_RUNS])}")
    assert compare_line("http://h:1/", uuids[:2], "members") == \
        f"compare the 2 members on the dashboard: http://h:1/compare?runs={uuids[0]},{uuids[1]}"
    assert dashboard_of(["--n-workers", "2", "--dashboard", "http://h:1"]) == "http://h:1"
    assert dashboard_of(["--dashboard=http://h:2"]) == "http://h:2"
    assert dashboard_of(["--dashboard", "none"]) is None and dashboard_of(["--seed", "3"]) is None


def test_a_live_value_is_changed_when_the_run_uses_another_than_it_started_with() -> None:
    def live(key: str, kind: str, default: float) -> dict[str, Any]:
        return {"name": key, "computed": {"type": "DynamicSchedule", "default": default, "range": [0, 16],
                                          "dynamic_type": kind}}

    configs = {"epochs": live("epochs", "int", 4), "learning_rate": live("learning_rate", "float", 2.5e-4),
               "clip_range": live("clip_range", "float", 0.1), "seed": {"name": "seed", "computed": 3}}
    # labml reports every value as a float; a value handed out (delivered) or queued is not in use yet.
    state = {"reported": {"epochs": 4.0, "learning_rate": 3e-4}, "delivered": {"epochs": 4, "clip_range": 0.2},
             "pending": {"clip_range": 0.3}, "sent": {}}
    assert changed_live_values(configs, state) == {"learning_rate": {"start": 2.5e-4, "now": 3e-4}}
    assert seed_of(configs) == 3 and seed_of({"seed": {"computed": True}}) is None and seed_of({}) is None


def test_a_sweep_prints_the_page_of_the_trials_that_trained(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"run_uuid": "b" * 32, "updates": 5}, {"run_uuid": "a" * 32, "updates": 0},
            {"run_uuid": "c" * 32, "status": "failed"}]  # ranked best first; Ray lost the third before it ran
    print_comparison("http://127.0.0.1:5005/api/v1/default", rows)
    print_comparison(None, rows)  # trials that reported to no dashboard
    assert capsys.readouterr().out == (f"compare the 2 trials on the dashboard: http://127.0.0.1:5005/compare?runs="
                                       f"{'b' * 32},{'a' * 32}\n")


def test_the_page_needs_nothing_from_outside(dashboard: Dashboard) -> None:
    status, page = dashboard.request("GET", "/compare?runs=a,b&metrics=entropy")
    assert status == 200 and '<script src="/_dashboard/compare.js" defer></script>' in page
    assert "/_vendor/bootstrap-5.0.0-beta2/dist/css/bootstrap.min.css" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # every library local: the dashboard works offline
    for name in ("compare.js", "compare.css", "compare-pick.js"):
        assert dashboard.request("GET", f"/_dashboard/{name}")[0] == 200


def test_the_runs_lists_ticks_stop_at_the_apis_cap() -> None:
    script = (REPO / "dashboard" / "static" / "compare-pick.js").read_text()
    assert re.search(r"const MAX_RUNS = (\d+);", script).group(1) == str(MAX_COMPARED_RUNS)  # type: ignore[union-attr]


def wait(browser: Browser, expression: str) -> bool:
    """`browser.wait_until`, also across a navigation (its page's context goes away meanwhile)."""
    deadline = time.monotonic() + PAGE_LIMIT_S
    while time.monotonic() < deadline:
        try:
            return browser.wait_until(expression, deadline - time.monotonic())
        except RuntimeError:  # the page being replaced
            time.sleep(0.2)
    return False


def click(browser: Browser, selector: str) -> None:
    """A real mouse click at the middle of the element (as a person's, not a script's `click()`)."""
    found = browser.evaluate(f"(() => {{ const e = document.querySelector({selector!r}); if (!e) return null;"
                             " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    assert found is not None, f"no {selector} on {browser.evaluate('location.href')}"
    x, y = found
    for kind in ("mousePressed", "mouseReleased"):
        browser.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_runs_ticked_in_the_list_are_drawn_side_by_side(dashboard: Dashboard, seeds: dict[str, Any], tmp_path: Path,
                                                        no_leftover_processes: None, chromium: Chromium) -> None:
    a, b = seeds["uuids"]
    with chromium.tab(height=1200) as browser:
        browser.load(f"{dashboard.url}/runs")
        assert browser.wait_until(f"document.querySelector('input[data-run=\"{b}\"]') !== null", PAGE_LIMIT_S)
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
