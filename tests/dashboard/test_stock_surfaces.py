"""labml's stock surfaces that do not apply to a local training dashboard, in a real browser: the
empty runs list says how to send a run, the menu offers no computers and no sign-out, the run page
offers no comparison, and the video panel does not cover a narrow window's page."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import CHROMIUM, WIDTHS, Browser, Chromium
from dashboard_support import Dashboard, finished_probe_run

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")]
PAGE_LIMIT_S = 60.0
VISIBLE = "(el => el.getClientRects().length > 0)"  # rendered, not display:none (nor inside such)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Iterator[Dashboard]:
    """This module's dashboard, reading run videos from `runs_dir` (it starts with no runs)."""
    d = Dashboard(tmp_path_factory.mktemp("dashboard-data"), options=("--runs-dir", str(runs_dir)))
    try:
        yield d.wait_ready()
    finally:
        d.kill()


def visible_with_text(browser: Browser, text: str) -> int:
    return browser.evaluate(f"[...document.querySelectorAll('body *')].filter(el => el.children.length === 0"
                            f" && el.textContent.trim() === {text!r} && {VISIBLE}(el)).length")


def test_the_empty_dashboard_says_how_to_send_a_run_and_offers_no_stock_menu(
        dashboard: Dashboard, no_leftover_processes: None, chromium: Chromium) -> None:
    with chromium.tab(height=700) as browser:
        browser.load(f"{dashboard.url}/runs")
        told = browser.wait_until("document.body.innerText.includes('No runs here yet')", PAGE_LIMIT_S)
        text = browser.evaluate("document.body.innerText")
        browser.evaluate("document.querySelector('.nav-link, .burger, nav button, .fa-bars, .fas').click()")
        menu = browser.wait_until("document.body.innerText.includes('Archived Runs')", PAGE_LIMIT_S)
        shown = {name: visible_with_text(browser, name) for name in ("Computers", "Sign out", "Archived Runs")}
        avatars = browser.evaluate(f"[...document.querySelectorAll('img')].filter(i => i.src.includes('user.png')"
                                   f" || i.classList.contains('rounded-circle')).filter({VISIBLE}).length")
        counters = browser.evaluate(f"[...document.querySelectorAll('.time-remaining')].filter({VISIBLE}).length")
        refresh = browser.evaluate("[...document.querySelectorAll('.fa-sync')].map(i => i.closest('nav, button, a')"
                                   ".title)")
    assert told, text
    assert f"python -m experiments.breakout --dashboard {dashboard.url}" in text
    assert f"python -m experiments.breakout --resume RUN_UUID --dashboard {dashboard.url}" in text
    assert "two lines of code" not in text and "PyTorch" not in text
    assert menu and shown == {"Computers": 0, "Sign out": 0, "Archived Runs": 1}
    assert avatars == 0 and counters == 0  # no account here; the countdown to the next refresh said nothing
    assert refresh == ["refresh now (the page also refreshes itself every 2 minutes)"]


@pytest.fixture(scope="module")
def filmed_run(dashboard: Dashboard, runs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A finished probe run with a video in its folder under the dashboard's --runs-dir."""
    run_uuid, probe = finished_probe_run(dashboard.url, tmp_path_factory.mktemp("probe"), "6")
    assert "FINISHED" in probe.output, probe.output  # exited 0: labml's sender delivered everything
    video = runs_dir / "probe" / run_uuid / "videos" / "update_000001.mp4"
    video.parent.mkdir(parents=True)
    video.write_bytes(b"\0\0\0\x18ftypmp42")  # only listed here, never played
    return run_uuid


def test_the_run_page_offers_no_comparison(dashboard: Dashboard, filmed_run: str,
                                            no_leftover_processes: None, chromium: Chromium) -> None:
    with chromium.tab() as browser:
        browser.load(f"{dashboard.url}/run/{filmed_run}")
        drawn = browser.wait_until("document.querySelector('.labml-card svg path') !== null"
                                   " && document.body.innerText.includes('CONFIGURATIONS')", PAGE_LIMIT_S)
        # The stock card is rendered, then hidden within the next half second.
        hidden = browser.wait_until(
            "![...document.querySelectorAll('.labml-card')].some(c => c.textContent.includes("
            f"'compare with another experiment') && {VISIBLE}(c))", PAGE_LIMIT_S)
        text = browser.evaluate("document.body.innerText")
    assert drawn and hidden, text
    assert "compare with another experiment" not in text


@pytest.mark.parametrize("width", [1280, 390])
def test_the_video_panel_covers_nothing_and_the_run_page_fits_the_width(
        dashboard: Dashboard, filmed_run: str, tmp_path: Path, width: int, no_leftover_processes: None,
        chromium: Chromium) -> None:
    with chromium.tab(width=width, height=800) as browser:
        browser.load(f"{dashboard.url}/run/{filmed_run}")
        shown = browser.wait_until("document.getElementById('dashboard-run-video') !== null && "
                                   f"{VISIBLE}(document.getElementById('dashboard-run-video'))", PAGE_LIMIT_S)
        browser.wait_until("document.body.innerText.includes('CONFIGURATIONS')", PAGE_LIMIT_S)
        browser.screenshot(tmp_path / f"run-{width}.png")
        # In the page's flow, under the run's header card: no card lies under it. Measured while the
        # panel is there: labml-app draws its cards again as their data comes, and run-video.js puts
        # the panel back after each drawing (null in between).
        page = None
        deadline = time.monotonic() + PAGE_LIMIT_S
        while page is None and time.monotonic() < deadline:
            page = browser.evaluate(
                "(() => { const v = document.getElementById('dashboard-run-video'); if (!v) return null;"
                " const p = v.getBoundingClientRect();"
                " const cards = [...document.querySelectorAll('.labml-card')].filter(c => c.getClientRects().length > 0)"
                "   .map(c => c.getBoundingClientRect());"
                " return {position: getComputedStyle(v).position,"
                "   covered: cards.filter(c => c.top < p.bottom && p.top < c.bottom && c.left < p.right && p.left < c.right).length,"
                "   under_first_card: cards.length > 1 && cards[0].bottom <= p.top && p.bottom <= cards[1].top}; })()")
            if page is None:
                time.sleep(0.2)
        widths = browser.evaluate(WIDTHS)
        # The top bar's buttons and links (the menu's burger, the title, the refresh and the rest), whole on screen.
        nav = browser.evaluate(
            "[...document.querySelectorAll('.nav-container a, .nav-container button, .nav-container .nav-link')]"
            f".filter({VISIBLE}).map(el => {{ const r = el.getBoundingClientRect();"
            " return {el: el.className || el.tagName, left: r.left, right: r.right}; })")
    assert shown and page is not None, "the video panel was never there to measure"
    assert page["position"] == "static" and page["covered"] == 0 and page["under_first_card"], page
    # Measured against a vertical scrollbar that takes room, as a classic one does.
    assert widths["inner"] == width and widths["tall"] and widths["scrollbar"] > 0, f"{widths}"
    assert widths["wide"] <= widths["fits"], f"{widths}"  # nothing scrolls sideways
    assert nav and all(b["left"] >= 0 and b["right"] <= widths["fits"] for b in nav), f"{nav} {widths}"
