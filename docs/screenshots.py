"""Make the dashboard screenshots in docs/images/ from real runs, a real dashboard and real Chromium.

    python docs/screenshots.py [--out docs/images]

First the comparison pages, on a dashboard of their own: three seeds trained by `experiments.curves
--jobs 3` and a population of three trained by `experiments.pbt`, each page opened at the address the
command printed, the seeds' smoothed with the cursor on the chart, and also at a phone's 390 px
(`--pages compare` makes only these). Then two tiny Breakout runs, sent to another dashboard (both
in a temporary folder), so that its runs list holds just these two:
- "resumed": trained 12 updates, ended, then resumed with --dashboard to its 24th; its chart
  covers both legs, its card shows options set on the command line, the grouping this machine
  chose from its cores, and defaults; it ends completed, so its live-hyperparameter page is off;
- "live": takes learning_rate=5e-4 from `experiments.tweak` (applied), is paused (SIGSTOP: it
  sends nothing), takes entropy_coef=0.02 (pending, as it truly is while the run sends nothing),
  is let go (it applies it) and is stopped with Ctrl-C (interrupted).
The runs list is shot with both runs ticked to compare. Every wait ends at its event or, after a
cap, with a line naming what it awaited and what the page or dashboard showed instead.
It takes a few minutes on two cores. Needs Debian's chromium (/usr/bin/chromium) and Pillow.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "dashboard")]  # the tests' own browser and process drivers

from browser import Browser  # noqa: E402
from dashboard_support import Dashboard, Process, run_tool  # noqa: E402
from PIL import Image  # noqa: E402

# 8 games (grouped by this machine's cores), 32 steps each: 256 agent steps an update; short games
# (200 frames) give a score within the first updates.
OPTIONS = ["--worker-steps", "32", "--minibatches", "2", "--epochs", "2", "--max-episode-frames", "200"]
# Caps on waits that end at their event, so that a wait that cannot end fails with what it awaited.
RUN_LIMIT_S = 600.0  # a run's updates, on two loaded cores
PAGE_LIMIT_S = 120.0  # a page showing what the dashboard already has
WIDTH = 1100
OWN_PAGE_HEIGHT = 1000  # one window height for the dashboard's own pages: their top margin is 2vh
MAX_BYTES = 120_000


def until(what: str, check: Callable[[], Any], limit_s: float = PAGE_LIMIT_S, seen: Callable[[], Any] | None = None) -> Any:
    """check()'s first true value; after limit_s, exit with a line naming `what` and what `seen` found."""
    deadline = time.monotonic() + limit_s
    while not (found := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: waited {limit_s:.0f} s for {what}" + (f"; found: {seen()}" if seen else ""))
        time.sleep(0.3)
    return found


def on_page(browser: Browser, what: str, condition: str, seen: str) -> None:
    """Wait for the JavaScript `condition` (and the icons' font) in the page; `seen` says what it shows instead."""
    until(what, lambda: browser.evaluate(f"document.fonts.status === 'loaded' && ({condition})"),
          seen=lambda: browser.evaluate(f"`fonts ${{document.fonts.status}}; ` + ({seen})"))


def breakout(data_dir: Path, *args: str) -> Process:
    return Process([sys.executable, "-m", "experiments.breakout", *OPTIONS, "--data-dir", str(data_dir), *args], cwd=REPO)


def finished(run: Process) -> str:
    if run.wait(RUN_LIMIT_S) != 0:
        raise SystemExit(f"screenshots: a run failed:\n{run.output[-3000:]}")
    return run_uuid_of(run)


def run_uuid_of(run: Process) -> str:
    line = run.wait_for_line(lambda line: re.match(r"\S+ run [0-9a-f]{32} in ", line) is not None, RUN_LIMIT_S)
    return line.split()[2]  # "<name> run <uuid> in <folder>", the run's first line


def status(dashboard: Dashboard, run_uuid: str) -> dict[str, Any]:
    return dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")[1]


def tweak(dashboard: Dashboard, run_uuid: str, change: str) -> None:
    done = run_tool("experiments.tweak", run_uuid, change, "--dashboard", dashboard.url)
    if done.returncode != 0:
        raise SystemExit(f"screenshots: tweak {change}: {done.stderr.strip()}")


def capture(browser: Browser, params: dict[str, Any], name: str, still: tuple[str, str] | None) -> str:
    """Page.captureScreenshot's image; with `still`, one taken while the condition held and the element stood still."""
    if still is None:
        return browser.call("Page.captureScreenshot", params)["data"]
    container, condition = still
    deadline = time.monotonic() + PAGE_LIMIT_S
    while time.monotonic() < deadline:
        # The shot counts if `condition` held before it and nothing in `container` changed until after it.
        if browser.evaluate(f"window.shotObserver?.disconnect(); window.shotChanges = 0; window.shotObserver ="
                            f" new MutationObserver(() => window.shotChanges++); window.shotObserver.observe({container},"
                            f" {{childList: true, subtree: true, characterData: true}}); {condition}"):
            data = browser.call("Page.captureScreenshot", params)["data"]
            if browser.evaluate("window.shotChanges === 0"):
                return data
        time.sleep(0.3)
    raise SystemExit(f"screenshots: {name}: waited {PAGE_LIMIT_S:.0f} s for {condition} to hold through a shot")


def write_png(image: Image.Image, path: Path) -> None:
    """`image` as a PNG of at most MAX_BYTES: true colours, else a palette, else smaller."""
    scale = 1.0
    while True:
        shown = image.resize((int(image.width * scale), int(image.height * scale)), Image.Resampling.LANCZOS) if scale < 1 else image
        # True colours where they fit; else a palette (median cut: smooth gradients in the charts' fills).
        for colours in (shown.convert("RGB"), shown.convert("RGB").quantize(colors=256)):
            out = io.BytesIO()
            colours.save(out, format="PNG", optimize=True)
            if out.tell() <= MAX_BYTES:
                break
        if out.tell() <= MAX_BYTES or scale < 0.4:
            break
        scale *= 0.85
    path.write_bytes(out.getvalue())
    print(f"{path}: {shown.width}×{shown.height}, {out.tell() // 1000} KB", flush=True)


def save(browser: Browser, path: Path, element: str | None = None, height: int | None = None,
         still: tuple[str, str] | None = None) -> None:
    """The window (or the element the JavaScript expression `element` finds), at most `height` pixels
    tall, as a PNG (write_png); with `still`, as capture() takes it."""
    clip = None
    if element is not None:
        box = browser.evaluate(f"(() => {{ const r = ({element}).getBoundingClientRect();"
                               " return [r.x + scrollX, r.y + scrollY, r.width, r.height, innerHeight]; })()")
        clip = {"x": box[0], "y": box[1], "width": box[2], "height": min(box[3], height or box[3]), "scale": 1}
        # Beyond the window Chromium would enlarge it for the shot: pages sized in vh move under the box.
        if clip["y"] + clip["height"] > box[4]:
            raise SystemExit(f"screenshots: {path.name}: {element} ends at {clip['y'] + clip['height']:.0f} px,"
                             f" below the {box[4]} px window; open the page in a taller window")
    params: dict[str, Any] = {"format": "png", "captureBeyondViewport": False, **({"clip": clip} if clip else {})}
    data = capture(browser, params, path.name, still)
    image: Image.Image = Image.open(io.BytesIO(base64.b64decode(data)))
    if clip is None and height is not None:
        image = image.crop((0, 0, image.width, min(height, image.height)))
    write_png(image, path)


CARD = "[...document.querySelectorAll('.labml-card')].find(c => c.querySelector('h3')?.textContent === '{}')"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python docs/screenshots.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="folder for the PNGs (default: docs/images)")
    parser.add_argument("--pages", choices=["all", "compare"], default="all", help="every page, or the comparison page only")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dashboard-screenshots-") as tmp_name:
        tmp = Path(tmp_name)
        # The comparisons report to a dashboard of their own, so that the runs list shows the two runs below.
        dashboard, compared = Dashboard(tmp / "dashboard"), Dashboard(tmp / "compared")
        processes: list[Process] = [dashboard, compared]
        try:
            dashboard.wait_ready()
            compared.wait_ready()
            comparisons(compared, tmp, out, processes)
            if args.pages == "compare":
                return 0
            resumed_uuid, live_uuid = runs(dashboard, tmp, out, processes)
            pages(dashboard, tmp, out, resumed_uuid, live_uuid)
        except AssertionError as e:  # the process drivers' failures: a run that did not exit or print its line
            raise SystemExit(f"screenshots: {e}") from None
        finally:
            for process in reversed(processes):
                process.kill()
    return 0


def runs(dashboard: Dashboard, tmp: Path, out: Path, processes: list[Process]) -> tuple[str, str]:
    """The resumed run and the live run (its page with a pending change taken on the way): their uuids."""
    folder = tmp / "runs"
    # A run of two legs: 12 updates, ended; resumed with the dashboard to its 24th.
    first = breakout(folder, "--updates", "24", "--stop-after-env-steps", str(12 * 256), "--name", "resumed",
                     "--dashboard", dashboard.url)
    processes.append(first)
    resumed_uuid = finished(first)
    second = breakout(folder, "--resume", resumed_uuid, "--stop-after-env-steps", "none", "--dashboard", dashboard.url)
    processes.append(second)
    finished(second)

    live = breakout(folder, "--updates", "100000", "--name", "live", "--dashboard", dashboard.url)
    processes.append(live)
    live_uuid = run_uuid_of(live)
    seen = lambda: status(dashboard, live_uuid)  # noqa: E731
    until("the live run's configs on the dashboard", lambda: seen().get("params"), RUN_LIMIT_S, seen)
    tweak(dashboard, live_uuid, "learning_rate=5e-4")
    until("learning_rate 0.0005 applied", lambda: seen()["params"]["learning_rate"]["applied"] == 5e-4, RUN_LIMIT_S, seen)
    os.kill(live.proc.pid, signal.SIGSTOP)  # it sends nothing now: a change stays pending
    try:
        tweak(dashboard, live_uuid, "entropy_coef=0.02")
        with Browser(tmp / "chromium", width=WIDTH, height=OWN_PAGE_HEIGHT) as browser:
            browser.load(f"{dashboard.url}/hyperparams/{live_uuid}")
            on_page(browser, "entropy_coef 0.02 pending on the live run's page",
                    "[...document.querySelectorAll('#params tr')].some(r => r.cells[0]?.textContent === 'entropy_coef'"
                    " && r.cells[5]?.textContent === '0.02')", ROWS)
            save(browser, out / "dashboard-hyperparams-pending.png", "document.querySelector('.page')", 640)
    finally:
        os.kill(live.proc.pid, signal.SIGCONT)
    until("entropy_coef 0.02 applied", lambda: seen()["params"]["entropy_coef"]["applied"] == 0.02, RUN_LIMIT_S, seen)
    os.kill(live.proc.pid, signal.SIGINT)
    live.wait(RUN_LIMIT_S)
    until("the live run interrupted on the dashboard", lambda: seen()["status"] == "interrupted", RUN_LIMIT_S, seen)
    return resumed_uuid, live_uuid


ROWS = "[...document.querySelectorAll('#params tr')].map(r => [...r.cells].map(c => c.textContent).join('|')).join('; ')"
TICKS = "[...document.querySelectorAll('a.list-item .dashboard-compare-tick input')]"
RUN_ROWS = "[...document.querySelectorAll('a.list-item')].map(r => r.getAttribute('href') + ' ' + r.querySelector('.status')?.textContent).join(', ')"


def pages(dashboard: Dashboard, tmp: Path, out: Path, resumed_uuid: str, live_uuid: str) -> None:
    """The runs list with both runs ticked to compare, the resumed run's page, card and live-hyperparameter page."""
    # The runs list fills this window: its "Compare 2 runs" button sits at the window's bottom.
    with Browser(tmp / "chromium", width=WIDTH, height=480) as browser:
        browser.load(f"{dashboard.url}/runs")
        row = "document.querySelector('a.list-item[href=\"/run/{}\"]')"
        on_page(browser, f"the runs list: {live_uuid} interrupted and {resumed_uuid} completed, each with its tick",
                f"{row.format(live_uuid)}?.querySelector('.status')?.textContent === 'interrupted'"
                f" && {row.format(resumed_uuid)}?.querySelector('.status')?.textContent === 'completed'"
                f" && {TICKS}.length === 2", RUN_ROWS)
        browser.evaluate(f"{TICKS}.forEach(i => i.click())")
        ticked = (f"{TICKS}.length === 2 && {TICKS}.every(i => i.checked)"
                  " && document.getElementById('dashboard-compare-button')?.textContent === 'Compare 2 runs'")
        on_page(browser, "both runs ticked and the button 'Compare 2 runs' on the runs list", ticked,
                f"{TICKS}.map(i => i.checked).join() + ' ' + document.getElementById('dashboard-compare-button')?.textContent")
        save(browser, out / "dashboard-runs.png", still=("document.querySelector('a.list-item').parentElement", ticked))

    with Browser(tmp / "chromium", width=WIDTH, height=2400) as browser:  # the Configurations card within it
        browser.load(f"{dashboard.url}/run/{resumed_uuid}")
        on_page(browser, "the resumed run's page: its chart and its Configurations card",
                f"{CARD.format('Metrics')}?.querySelector('svg path') != null"
                f" && {CARD.format('Configurations')}?.querySelector('.config') != null",
                "[...document.querySelectorAll('.labml-card h3')].map(h => h.textContent).join(', ')")
        save(browser, out / "dashboard-run.png", height=900)
        save(browser, out / "dashboard-configs.png", CARD.format("Configurations"))

    with Browser(tmp / "chromium", width=WIDTH, height=OWN_PAGE_HEIGHT) as browser:
        browser.load(f"{dashboard.url}/hyperparams/{resumed_uuid}")
        on_page(browser, "the completed run's live-hyperparameter page with Apply off and the reason shown",
                "document.getElementById('apply')?.disabled === true && !document.getElementById('refusal').hidden"
                " && document.querySelectorAll('#params tr').length > 0",
                "`apply disabled ${document.getElementById('apply')?.disabled}; ` + " + ROWS)
        save(browser, out / "dashboard-hyperparams-off.png", "document.querySelector('.page')", 720)


def comparisons(dashboard: Dashboard, tmp: Path, out: Path, processes: list[Process]) -> None:
    """The comparison page of three seeds (`curves --jobs 3`) and of a population of three (`pbt`), each
    opened at the address its command printed."""
    tiny = ["--n-workers", "1", "--envs-per-worker", "2", "--backend", "serial", "--epochs", "1", "--minibatches", "2",
            "--worker-steps", "32", "--max-episode-frames", "200", "--dashboard", dashboard.url]  # 64 agent steps an update
    seeds = Process([sys.executable, "-m", "experiments.curves", "--seeds", "1", "2", "3", "--jobs", "3", "--total-env-steps",
                     "768", "--budget", "768", "--grid", "64", "--budgets", "768", "--out", str(tmp / "curves"), *tiny], cwd=REPO)
    population = Process([sys.executable, "-m", "experiments.pbt", "--population", "3", "--interval", "3",
                          "--total-env-steps", "576", "--data-dir", str(tmp / "pbt"), *tiny], cwd=REPO)
    processes += [seeds, population]
    addresses = {}
    for name, process in (("seeds", seeds), ("pbt", population)):
        if process.wait(RUN_LIMIT_S) != 0:
            raise SystemExit(f"screenshots: {name} failed:\n{process.output[-3000:]}")
        printed = [line for line in process.lines if " on the dashboard: " in line]
        if not printed:
            raise SystemExit(f"screenshots: {name} printed no comparison page's address:\n{process.output[-3000:]}")
        addresses[name] = printed[-1].split(" on the dashboard: ", 1)[1]
    # The seeds smoothed (the raw curves faint) with the cursor on the chart; the population as it opens.
    addresses["seeds"] += "&smooth=0.6"
    for width, height, names in ((WIDTH, OWN_PAGE_HEIGHT, ("seeds", "pbt")), (390, 1500, ("seeds",))):
        with Browser(tmp / "chromium", width=width, height=height) as browser:
            for name in names:
                browser.load(addresses[name])
                on_page(browser, f"the comparison page of the {name} with 3 curves",
                        "document.body.dataset.loaded === 'yes' && document.querySelectorAll('.curve').length === 3",
                        "`loaded ${document.body.dataset.loaded}, ${document.querySelectorAll('.curve').length} curves, `"
                        " + document.getElementById('message')?.textContent")
                if name == "seeds" and width == WIDTH:
                    point_cursor(browser)
                shot = f"dashboard-compare-{name}.png" if width == WIDTH else f"dashboard-compare-{name}-{width}px.png"
                save(browser, out / shot, "document.querySelector('.page')", height)


def point_cursor(browser: Browser) -> None:
    """A mouse over the middle of the first chart: its cursor line and each run's value there."""
    x, y = browser.evaluate("(() => { const svg = document.querySelector('.compare-chart svg');"
                            " const p = svg.querySelector('.curve').getAttribute('points').split(' ');"
                            " const [x, y] = p[Math.floor(p.length / 2)].split(',').map(Number);"
                            " const r = svg.getBoundingClientRect(); return [r.left + x, r.top + y]; })()")
    browser.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
    until("the cursor's values on the chart", lambda: browser.evaluate("document.querySelector('.chart-tip')?.hidden === false"))


if __name__ == "__main__":
    sys.exit(main())
