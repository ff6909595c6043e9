"""Make the dashboard screenshots in docs/images/ from real runs, a real dashboard and real Chromium.

    python docs/screenshots.py [--out docs/images]

Two tiny Breakout runs are sent to a dashboard of their own (in a temporary folder):
- "resumed": trained 12 updates, ended, then resumed with --dashboard to its 24th; its chart
  covers both legs, its card shows options set on the command line, the grouping this machine
  chose from its cores, and defaults; it ends completed, so its live-hyperparameter page is off;
- "live": takes learning_rate=5e-4 from `experiments.tweak` (applied), is paused (SIGSTOP: it
  sends nothing), takes entropy_coef=0.02 (pending, as it truly is while the run sends nothing),
  is let go (it applies it) and is stopped with Ctrl-C (interrupted).
Then the comparison page, of three seeds trained by `experiments.curves --jobs 3` and of a population
of three trained by `experiments.pbt`, both sent to the dashboard: each page is the address the
command printed (`--pages compare` makes only these two).
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
LIMIT_S = 900.0
WIDTH = 1100
MAX_BYTES = 150_000


def until(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + LIMIT_S
    while not (found := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: never: {what}")
        time.sleep(0.3)
    return found


def breakout(data_dir: Path, *args: str) -> Process:
    return Process([sys.executable, "-m", "experiments.breakout", *OPTIONS, "--data-dir", str(data_dir), *args], cwd=REPO)


def finished(run: Process) -> str:
    if run.wait(LIMIT_S) != 0:
        raise SystemExit(f"screenshots: a run failed:\n{run.output[-3000:]}")
    return run_uuid_of(run)


def run_uuid_of(run: Process) -> str:
    line = run.wait_for_line(lambda line: re.match(r"\S+ run [0-9a-f]{32} in ", line) is not None, LIMIT_S)
    return line.split()[2]  # "<name> run <uuid> in <folder>", the run's first line


def status(dashboard: Dashboard, run_uuid: str) -> dict[str, Any]:
    return dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")[1]


def tweak(dashboard: Dashboard, run_uuid: str, change: str) -> None:
    done = run_tool("experiments.tweak", run_uuid, change, "--dashboard", dashboard.url)
    if done.returncode != 0:
        raise SystemExit(f"screenshots: tweak {change}: {done.stderr.strip()}")


def save(browser: Browser, path: Path, element: str | None = None, height: int | None = None) -> None:
    """The page (or the element the JavaScript expression `element` finds), at most `height` pixels
    tall, as a small PNG: resized to fit MAX_BYTES, in an adaptive palette."""
    clip = None
    if element is not None:
        box = browser.evaluate(f"(() => {{ const r = ({element}).getBoundingClientRect();"
                               " return [r.x + scrollX, r.y + scrollY, r.width, r.height]; })()")
        clip = {"x": box[0], "y": box[1], "width": box[2], "height": min(box[3], height or box[3]), "scale": 1}
    params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
    if clip is not None:
        params["clip"] = clip
    image = Image.open(io.BytesIO(base64.b64decode(browser.call("Page.captureScreenshot", params)["data"])))
    if clip is None and height is not None:
        image = image.crop((0, 0, image.width, min(height, image.height)))
    scale = 1.0
    while True:
        shown = image.resize((int(image.width * scale), int(image.height * scale)), Image.LANCZOS) if scale < 1 else image
        out = io.BytesIO()
        shown.convert("RGB").quantize(colors=128).save(out, format="PNG", optimize=True)
        if out.tell() <= MAX_BYTES or scale < 0.4:
            break
        scale *= 0.85
    path.write_bytes(out.getvalue())
    print(f"{path}: {shown.width}×{shown.height}, {out.tell() // 1000} KB", flush=True)


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
        dashboard = Dashboard(tmp / "dashboard")
        processes: list[Process] = [dashboard]
        try:
            dashboard.wait_ready()
            comparisons(dashboard, tmp, out, processes)
            if args.pages == "compare":
                return 0
            runs = tmp / "runs"
            # A run of two legs: 12 updates, ended; resumed with the dashboard to its 24th.
            first = breakout(runs, "--updates", "24", "--stop-after-env-steps", str(12 * 256), "--name", "resumed",
                             "--dashboard", dashboard.url)
            processes.append(first)
            resumed_uuid = finished(first)
            second = breakout(runs, "--resume", resumed_uuid, "--stop-after-env-steps", "none", "--dashboard", dashboard.url)
            processes.append(second)
            finished(second)

            live = breakout(runs, "--updates", "100000", "--name", "live", "--dashboard", dashboard.url)
            processes.append(live)
            live_uuid = run_uuid_of(live)
            until("the live run's configs on the dashboard", lambda: status(dashboard, live_uuid).get("params"))
            tweak(dashboard, live_uuid, "learning_rate=5e-4")
            until("learning_rate applied", lambda: status(dashboard, live_uuid)["params"]["learning_rate"]["applied"] == 5e-4)
            os.kill(live.proc.pid, signal.SIGSTOP)  # it sends nothing now: a change stays pending
            try:
                tweak(dashboard, live_uuid, "entropy_coef=0.02")
                with Browser(tmp / "chromium", width=WIDTH, height=700) as browser:
                    browser.load(f"{dashboard.url}/hyperparams/{live_uuid}")
                    until("the pending change on the page", lambda: browser.evaluate(
                        "[...document.querySelectorAll('#params tr')].some(r => r.cells[5]?.textContent === '0.02')"))
                    save(browser, out / "dashboard-hyperparams-pending.png", "document.querySelector('.page') || document.body", 640)
            finally:
                os.kill(live.proc.pid, signal.SIGCONT)
            until("entropy_coef applied", lambda: status(dashboard, live_uuid)["params"]["entropy_coef"]["applied"] == 0.02)
            os.kill(live.proc.pid, signal.SIGINT)
            live.wait(LIMIT_S)
            until("the live run interrupted", lambda: status(dashboard, live_uuid)["status"] == "interrupted")

            with Browser(tmp / "chromium", width=WIDTH, height=2000) as browser:
                browser.load(f"{dashboard.url}/runs")
                until("the runs list", lambda: browser.evaluate(
                    "document.querySelectorAll('.list-item').length >= 2 && [...document.querySelectorAll('.list-item .status')]"
                    ".map(s => s.textContent).sort().join() === 'completed,interrupted'"))
                save(browser, out / "dashboard-runs.png", height=470)

                browser.load(f"{dashboard.url}/run/{resumed_uuid}")
                until("the run page's chart and card", lambda: browser.evaluate(
                    f"{CARD.format('Metrics')}?.querySelector('svg path') != null"
                    f" && {CARD.format('Configurations')}?.querySelector('.config') != null"))
                save(browser, out / "dashboard-run.png", height=900)
                save(browser, out / "dashboard-configs.png", CARD.format("Configurations"))

                browser.load(f"{dashboard.url}/hyperparams/{resumed_uuid}")
                until("the finished run's page", lambda: browser.evaluate("document.getElementById('apply')?.disabled === true"
                                                                          " && !document.getElementById('refusal').hidden"))
                save(browser, out / "dashboard-hyperparams-off.png", "document.querySelector('.page') || document.body", 720)
        finally:
            for process in reversed(processes):
                process.kill()
    return 0


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
    pages = {}
    for name, process in (("seeds", seeds), ("pbt", population)):
        if process.wait(LIMIT_S) != 0:
            raise SystemExit(f"screenshots: {name} failed:\n{process.output[-3000:]}")
        line = next(line for line in reversed(process.lines) if " on the dashboard: " in line)
        pages[name] = line.split(" on the dashboard: ", 1)[1]
    with Browser(tmp / "chromium", width=WIDTH, height=1500) as browser:
        for name, url in pages.items():
            browser.load(url)
            until(f"the comparison page of the {name}", lambda: browser.evaluate(
                "document.body.dataset.loaded === 'yes' && document.querySelectorAll('.curve').length === 3"
                " && document.fonts.status === 'loaded'"))  # the icons' font too
            save(browser, out / f"dashboard-compare-{name}.png", "document.querySelector('.page')", 1000)


if __name__ == "__main__":
    sys.exit(main())
