"""The real trainer (`python -m experiments.breakout --dashboard URL`) against the real dashboard,
and what a person sees of its runs in a real browser: the runs list, a run page, its
configurations, the live-hyperparameter page.

Two runs are sent to one dashboard: a Breakout run that takes a live change and is stopped with
Ctrl-C (SIGINT), and a Pong run named "faults" that a killed worker stops (a fault).
(The docs' screenshots come from `docs/screenshots.py`, which drives the same pages.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from browser import CHROMIUM, Browser, Chromium
from dashboard_support import REPO, Dashboard, Process, free_port, run_tool
from test_live_run import series_of

from tests.chaos import worker_pids

# A dashboard of this module's own (tests/dashboard/conftest.py): its runs list is read in a browser, and
# the server's whole log is read for page views.
FRESH_DASHBOARD = True

PAGE_LIMIT_S = 120.0
# Short games (200 frames = 50 agent steps, then truncated) give the run a score within its first
# updates; --max-worker-restarts 0 makes one killed worker a fault.
TINY = ["--n-workers", "2", "--worker-steps", "32", "--minibatches", "2", "--epochs", "1",
        "--max-episode-frames", "200", "--updates", "100000"]
CHANGED = {"n_workers": "2 (set)", "worker_steps": "32 (set)", "minibatches": "2 (set)", "max_episode_frames": "200 (set)",
           "updates": "100,000 (set)", "anneal_learning_rate": "false (set)"}  # as the card writes them


def needs_chromium(test: Any) -> Any:
    """A browser test (`-m browser`), skipped where Debian's chromium is absent."""
    return pytest.mark.browser(pytest.mark.skipif(not CHROMIUM.exists(),
                                                  reason="needs Debian chromium (apt-get install chromium)")(test))


def metric_names(dashboard: Dashboard, run_uuid: str) -> set[str]:
    _, metrics = dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})
    return {s["name"] for s in metrics.get("series", [])}


def wait_for(condition: Any, what: str, limit_s: float = 600) -> None:
    deadline = time.monotonic() + limit_s  # a cap: the loop ends as soon as the condition holds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)


def run_log(run_dir: Path) -> dict[str, Any]:
    """The last line of labml's run_log.jsonl: the status labml recorded for the run."""
    return json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[-1])


@pytest.fixture(scope="module")
def breakout_run(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A Breakout run that took learning_rate=1e-3 live, then was stopped with Ctrl-C; its summary."""
    data_dir = tmp_path_factory.mktemp("breakout-runs")
    run = Process([sys.executable, "-m", "experiments.breakout", *TINY, "--anneal-learning-rate", "false",
                   "--data-dir", str(data_dir), "--dashboard", dashboard.url], cwd=REPO)
    try:
        line = run.wait_for_line(lambda text: "Monitor experiment at" in text)
        run_uuid = re.search(r"/run/([0-9a-f]{32})", line).group(1)
        # Its configs (the live values among them) may come with a later update than the one labml's page line answers.
        wait_for(lambda: dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")[1].get("params"), "the run's configs")
        tweak = run_tool("experiments.tweak", run_uuid, "learning_rate=1e-3", "--dashboard", dashboard.url)
        assert tweak.returncode == 0, tweak.stderr
        # The run takes it and says so on its console, in its own words (not labml's).
        run.wait_for_line(lambda text: text.startswith("live value learning_rate: ") and "→ 0.001, from the next update" in text)
        # Stopped (Ctrl-C, as a user would) once the dashboard holds a score and a learning rate
        # taken with the changed value, whatever the machine's load.
        wait_for(lambda: run.proc.poll() is not None or (
            {"score_mean_100", "learning_rate"} <= metric_names(dashboard, run_uuid)
            and abs(series_of(dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})[1],
                              "learning_rate")["value"][-1] - 1e-3) < 1e-9), "a score and the changed learning rate")
        os.kill(run.proc.pid, signal.SIGINT)
        assert run.wait() == 128 + signal.SIGINT, run.output[-3000:]
    finally:
        run.kill()
    run_dir = data_dir / "breakout" / run_uuid
    return {"run_uuid": run_uuid, "run_dir": run_dir, "summary": json.loads((run_dir / "summary.json").read_text())}


@pytest.fixture(scope="module")
def faulted_run(dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A Pong run named "faults" stopped by a fault: one of its workers killed, no restart allowed."""
    data_dir = tmp_path_factory.mktemp("pong-runs")
    run = Process([sys.executable, "-m", "experiments.breakout", *TINY, "--game", "Pong", "--name", "faults",
                   "--max-worker-restarts", "0", "--data-dir", str(data_dir), "--dashboard", dashboard.url], cwd=REPO)
    try:
        line = run.wait_for_line(lambda text: "Monitor experiment at" in text)
        run_uuid = re.search(r"/run/([0-9a-f]{32})", line).group(1)
        wait_for(lambda: run.proc.poll() is not None or worker_pids(run.proc.pid), "a worker up")
        workers = worker_pids(run.proc.pid)
        assert workers, run.output[-3000:]  # the run ended before its workers were up
        os.kill(workers[0], signal.SIGKILL)
        assert run.wait() == 1, run.output[-3000:]
    finally:
        run.kill()
    run_dir = data_dir / "faults" / run_uuid
    return {"run_uuid": run_uuid, "run_dir": run_dir, "summary": json.loads((run_dir / "summary.json").read_text())}


def save_screenshot(browser: Browser, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    browser.screenshot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_training_run_reaches_dashboard_and_takes_a_live_change(dashboard: Dashboard, breakout_run: dict[str, Any]) -> None:
    run_uuid, summary = breakout_run["run_uuid"], breakout_run["summary"]
    assert summary["status"] == "interrupted" and summary["updates"] >= 1 and summary["games"] >= 1

    status, info = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    assert status == 200 and info["name"] == "Breakout"
    configs = {c["key"]: c for c in info["configs"]}
    assert configs["n_workers"]["computed"] == "2 (set)" and configs["clip_range"]["value"]["type"] == "DynamicSchedule"

    wait_for(lambda: {"policy_loss", "value_loss", "entropy", "learning_rate", "sps", "score_mean_100"}
             <= metric_names(dashboard, run_uuid), "the run's last packets")  # delivered as the run exits
    _, metrics = dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})
    lr = series_of(metrics, "learning_rate")["value"]
    # The live change replaced the (here un-annealed) base learning rate mid-run.
    assert abs(lr[0] - 2.5e-4) < 1e-9 and abs(lr[-1] - 1e-3) < 1e-9, lr


# ---- item 6: interrupted and faulted runs say so, in labml's record and on the dashboard -----------

@pytest.mark.browser
def test_an_interrupted_and_a_faulted_run_show_their_status(dashboard: Dashboard, breakout_run: dict[str, Any],
                                                            faulted_run: dict[str, Any], request: pytest.FixtureRequest) -> None:
    assert run_log(breakout_run["run_dir"])["status"] == "interrupted"
    faulted = faulted_run["summary"]
    assert faulted["status"] == "crashed" and faulted["error"].startswith("WorkerKeepsFailing")
    assert run_log(faulted_run["run_dir"]) | {"time": 0} == {"status": "crashed", "rank": 0, "details": faulted["error"],
                                                            "time": 0}
    for run, expected in [(breakout_run, "interrupted"), (faulted_run, "crashed")]:
        status, data = dashboard.request("GET", f"/api/v1/run/status/{run['run_uuid']}")
        assert status == 200 and data["run_status"]["status"] == expected, data
    if not CHROMIUM.exists():
        pytest.skip("the browser half needs Debian chromium")
    chromium: Chromium = request.getfixturevalue("chromium")  # asked for here: the half above runs without it
    with chromium.tab() as browser:
        for run, expected in [(breakout_run, "interrupted"), (faulted_run, "crashed")]:
            browser.load(f"{dashboard.url}/run/{run['run_uuid']}")
            shown = browser.wait_until(f"[...document.querySelectorAll('.run .status')].some(s => s.textContent === '{expected}')",
                                       PAGE_LIMIT_S)
            assert shown, f"the run page never said {expected}: {browser.evaluate('document.body.innerText')[:2000]}"


# ---- item 9: the runs list names runs by game, with a short uuid, the status and the score ---------

@needs_chromium
def test_runs_list_shows_game_short_uuid_status_and_score(dashboard: Dashboard, breakout_run: dict[str, Any],
                                                          faulted_run: dict[str, Any], tmp_path: Path, chromium: Chromium) -> None:
    with chromium.tab(height=700) as browser:
        browser.load(f"{dashboard.url}/runs")
        listed = browser.wait_until(
            "document.querySelectorAll('.list-item').length >= 2"
            " && [...document.querySelectorAll('.list-item span.key')].some(k => k.textContent === 'score_mean_100'"
            " && k.nextElementSibling.dataset.plain)", PAGE_LIMIT_S)
        items = browser.evaluate("""[...document.querySelectorAll('.list-item')].map(item => ({
            name: item.querySelector('h5').textContent, comment: item.querySelector('h6').textContent,
            status: item.querySelector('.status').textContent,
            metrics: [...item.querySelectorAll('span.key')].map(k => [k.textContent, k.nextElementSibling.textContent])}))""")
        save_screenshot(browser, tmp_path, "dashboard-runs.png")
    assert listed, f"the runs list never showed the runs with a score: {items}"
    by_uuid = {item["comment"].split(" · ")[0]: item for item in items}  # the short uuid, then the seed
    breakout = by_uuid[breakout_run["run_uuid"][:8]]
    assert breakout["name"] == "Breakout" and breakout["status"] == "interrupted"
    # The latest score as the dashboard holds it, written as a score.
    _, metrics = dashboard.request("POST", f"/api/v1/metrics/{breakout_run['run_uuid']}", {"get_all": True})
    assert breakout["metrics"] == [["score_mean_100", f"{series_of(metrics, 'score_mean_100')['value'][-1]:.2f}"]]
    pong = by_uuid[faulted_run["run_uuid"][:8]]
    assert pong["name"] == "Pong · faults" and pong["status"] == "crashed"


# ---- items 7, 8 and 10: the run page charts the score, lists the set options and live values -------

@needs_chromium
def test_run_page_charts_the_score_and_lists_set_options_and_live_values(
        dashboard: Dashboard, breakout_run: dict[str, Any], tmp_path: Path, chromium: Chromium) -> None:
    run_uuid = breakout_run["run_uuid"]
    with chromium.tab(height=2100) as browser:  # tall enough to show every card
        browser.load(f"{dashboard.url}/run/{run_uuid}")
        card = "[...document.querySelectorAll('.labml-card')].find(c => c.querySelector('h3')?.textContent === '{}')"
        drawn = browser.wait_until(
            f"{card.format('Metrics')}?.querySelector('svg path') != null"
            f" && {card.format('Configurations')}?.querySelector('.config') != null", PAGE_LIMIT_S)
        # The card lists the series its chart draws (labml-app: those selected in its preferences).
        charted = browser.evaluate(f"[...{card.format('Metrics')}.querySelectorAll('.sparkline-list-item .title')]"
                                   ".map(t => t.textContent)")
        configs = browser.evaluate(f"Object.fromEntries([...{card.format('Configurations')}.querySelectorAll('.config')]"
                                   ".map(c => [c.querySelector('.key').textContent, c.querySelector('.computed').textContent]))")
        process_buttons = browser.evaluate("[...document.querySelectorAll('.process-row')]"
                                           ".map(r => getComputedStyle(r).display)")
        save_screenshot(browser, tmp_path, "dashboard.png")
        # One click on the card: the metrics page, every series there to pick from.
        browser.evaluate(f"{card.format('Metrics')}.click()")
        listed = browser.wait_until(f"location.pathname === '/run/{run_uuid}/metrics'"
                                    " && document.querySelectorAll('.sparkline-list-item .title').length > 5", PAGE_LIMIT_S)
        one_click_away = set(browser.evaluate("[...document.querySelectorAll('.sparkline-list-item .title')]"
                                              ".map(t => t.textContent)"))
    assert drawn, "the run page never drew its Metrics and Configurations cards"
    assert charted == ["score_mean_100"]
    assert listed and {"score_mean_100", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "value_clip_fraction",
                       "explained_variance", "learning_rate", "clip_range"} <= one_click_away, one_click_away
    assert {k: configs.get(k) for k in CHANGED} == CHANGED  # what differs from the defaults
    assert configs["learning_rate"] == "0.001 (live)"  # the live value, not the declared 0.00025
    assert configs["clip_range"] == "0.1 (live)"
    assert "gamma" not in configs  # a default
    assert process_buttons == ["none"]  # labml's computer monitoring is not served


@needs_chromium
def test_hyperparameter_page_looks_like_the_app(dashboard: Dashboard, breakout_run: dict[str, Any], tmp_path: Path, chromium: Chromium) -> None:
    style = ("(() => { const s = getComputedStyle(document.body), c = document.querySelector('.labml-card');"
             " return [s.fontFamily, s.backgroundColor, s.color, c && getComputedStyle(c).backgroundColor]; })()")
    with chromium.tab(height=700) as browser:
        browser.load(f"{dashboard.url}/run/{breakout_run['run_uuid']}")
        assert browser.wait_until("document.querySelector('.labml-card') !== null", PAGE_LIMIT_S)
        app_style = browser.evaluate(style)
        browser.load(f"{dashboard.url}/hyperparams/{breakout_run['run_uuid']}")
        listed = browser.wait_until("document.querySelectorAll('#params input').length === 5", PAGE_LIMIT_S)
        page_style = browser.evaluate(style)
        current = browser.evaluate("[...document.querySelectorAll('#params tr')].find(r => r.cells[0].textContent"
                                   " === 'learning_rate').cells[3].textContent")
        save_screenshot(browser, tmp_path, "dashboard-hyperparams.png")
    assert listed and current == "0.001"
    assert page_style == app_style and None not in app_style, (page_style, app_style)


# ---- item 12: viewing runs logs no "unknown repo url" ---------------------------------------------

@needs_chromium
def test_page_views_log_no_unknown_repo_url(dashboard: Dashboard, chromium: Chromium) -> None:
    # A run whose git remote is not a hosted one (labml-app logged an error on every view of it).
    run_uuid = "0" * 31 + "c"
    packet = {"name": "local remote", "repo_remotes": ["/srv/code/project"], "commit": "unknown", "time": time.time()}
    status, answer = dashboard.request("POST", f"/api/v1/default/track?run_uuid={run_uuid}&labml_version=0.5.3", packet)
    assert status == 200 and not answer.get("errors"), answer
    with chromium.tab(height=700) as browser:
        for page in ("/runs", f"/run/{run_uuid}"):
            browser.load(dashboard.url + page)
            assert browser.wait_until("document.querySelector('.list-item, .run h3') !== null", PAGE_LIMIT_S)
    status, _ = dashboard.request("GET", f"/api/v1/run/{run_uuid}")  # the page's own request, once more
    assert status == 200
    assert "unknown repo url" not in dashboard.output, dashboard.output[-3000:]


# ---- an unreachable dashboard -----------------------------------------------------------------------

@pytest.mark.slow
def test_training_is_not_held_up_by_an_unreachable_dashboard(tmp_path: Path) -> None:
    """labml's sender retries an unreachable dashboard forever; the run's end waits for it only
    --dashboard-wait seconds (30 by default), then says so and exits with its summary."""
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = Process([sys.executable, "-m", "experiments.breakout", "--updates", "2", "--backend", "serial",
                   "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "16", "--minibatches", "2",
                   "--epochs", "1", "--data-dir", str(tmp_path), "--dashboard", closed, "--dashboard-wait", "1"], cwd=REPO)
    try:
        code = run.wait(600)
    finally:
        run.kill()
    assert code == 0, run.output[-3000:]
    assert "the dashboard did not take the run's last updates within 1 s (--dashboard-wait)" in run.output
    assert run.output.rstrip().endswith("summary.json")
