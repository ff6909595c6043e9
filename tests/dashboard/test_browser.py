"""The real front-end in a real browser: the run page shows the run and draws its metric chart; no
page of the dashboard is shown in a frame of another site's page."""

from __future__ import annotations

import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from browser import CHROMIUM, WIDTHS, Chromium
from dashboard_support import Dashboard

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")]

# Set to copy the run page's screenshot somewhere (e.g. for the README).
SCREENSHOT_ENV = "DASHBOARD_SCREENSHOT"
PAGE_LIMIT_S = 60.0


def test_run_page_renders_with_local_libraries(dashboard: Dashboard, finished_run: str, tmp_path: Path,
                                               no_leftover_processes: None, chromium: Chromium) -> None:
    with chromium.tab() as browser:
        browser.load(f"{dashboard.url}/run/{finished_run}")
        drawn = browser.wait_until(
            "document.querySelector('.run h3') !== null && document.body.innerText.includes('probe')"
            " && document.querySelector('.labml-card svg path') !== null"
            " && document.getElementById('dashboard-hyperparams-link') !== null", PAGE_LIMIT_S)
        screenshot = tmp_path / "run-page.png"
        browser.screenshot(screenshot)
        dom = browser.evaluate("document.documentElement.outerHTML")
        d3_loaded = browser.evaluate("typeof d3 === 'object' && d3.version")
        link = browser.evaluate("document.getElementById('dashboard-hyperparams-link').href")
    assert drawn, f"the run page never showed the run and its chart; DOM:\n{dom[:3000]}"
    assert d3_loaded == "6.7.0"
    assert "METRICS" in dom.upper() and "<svg" in dom
    assert link.endswith(f"/hyperparams/{finished_run}")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copy(screenshot, os.environ[SCREENSHOT_ENV])


def test_hyperparameter_page_lists_the_live_values_and_is_off_for_an_ended_run(
        dashboard: Dashboard, finished_run: str, tmp_path: Path, no_leftover_processes: None, chromium: Chromium) -> None:
    with chromium.tab(height=700) as browser:
        browser.load(f"{dashboard.url}/hyperparams/{finished_run}")
        listed = browser.wait_until("document.querySelectorAll('#params input').length === 5", PAGE_LIMIT_S)
        names = browser.evaluate("[...document.querySelectorAll('#params input')].map(i => i.name).join(',')")
        # The run has completed: Apply is off, and the page says why.
        off = browser.evaluate("document.getElementById('apply').disabled")
        why = browser.evaluate("document.getElementById('refusal').textContent")
        epochs = browser.evaluate("[...document.querySelectorAll('#params tr')].find(r => r.cells[0].textContent"
                                  " === 'epochs').cells[3].textContent")
        browser.screenshot(tmp_path / "hyperparams-page.png")
        browser.load(f"{dashboard.url}/run/{finished_run}")
        link_off = browser.wait_until("document.getElementById('dashboard-hyperparams-link') !== null && "
                                      "document.getElementById('dashboard-hyperparams-link').dataset.off === 'yes'",
                                      PAGE_LIMIT_S)
        link = browser.evaluate("[document.getElementById('dashboard-hyperparams-link').textContent,"
                                " document.getElementById('dashboard-hyperparams-link').title]")
    assert listed, "the hyperparameter page never listed the parameters"
    assert names == "clip_range,entropy_coef,epochs,learning_rate,value_coef"
    assert off and why == f"Changes are off: run {finished_run} is completed: a live change reaches only a running " \
                          f"run; resume it with --dashboard and change it while it runs."
    assert epochs == "4"  # what the run reported training with, an integer
    assert link_off and link[0] == "Live hyperparameters: off" and "is completed" in link[1]
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{finished_run}")
    assert info["params"]["learning_rate"]["pending"] is None


class FramingSite(BaseHTTPRequestHandler):
    """Another site: its page frames each page of the dashboard, and a page of its own."""

    targets: tuple[str, ...] = ()

    def do_GET(self) -> None:
        frames = [*self.targets, "/own"] if self.path == "/" else []
        body = "".join(f'<iframe src="{src}"></iframe>' for src in frames).encode() or b"<p>its own page</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_page_of_another_site_cannot_frame_the_dashboard(dashboard: Dashboard, finished_run: str,
                                                           no_leftover_processes: None, chromium: Chromium) -> None:
    # Both on localhost: another origin (another port), yet the same site, so Chromium keeps the
    # frames in the page's process, where the page's frame tree shows them.
    pages = ["/", "/runs", "/compare", f"/hyperparams/{finished_run}", f"/run/{finished_run}"]
    targets = [f"http://localhost:{dashboard.port}{page}" for page in pages]
    handler = type("Site", (FramingSite,), {"targets": tuple(targets)})
    site = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium.tab() as browser:
            browser.load(f"http://localhost:{site.server_address[1]}/")
            assert browser.wait_until("document.readyState === 'complete' && document.querySelectorAll('iframe').length === 6",
                                      PAGE_LIMIT_S)
            frames = [child["frame"] for child in browser.call("Page.getFrameTree")["frameTree"].get("childFrames", [])]
    finally:
        site.shutdown()
        site.server_close()
        thread.join()
    shown = {frame.get("unreachableUrl") or frame["url"]: frame["url"] for frame in frames}
    # Chromium shows its error page in place of each dashboard page; the site's own page is framed.
    assert shown == {**dict.fromkeys(targets, "chrome-error://chromewebdata/"),
                     f"http://localhost:{site.server_address[1]}/own": f"http://localhost:{site.server_address[1]}/own"}, frames


@pytest.mark.parametrize("width", [1280, 390])
def test_the_hyperparameter_page_fits_the_width_with_its_inputs_on_screen(
        dashboard: Dashboard, finished_run: str, width: int, tmp_path: Path, no_leftover_processes: None,
        chromium: Chromium) -> None:
    # Lower than the page at both widths, so that a vertical scrollbar takes its room beside it.
    with chromium.tab(width=width, height=500) as browser:
        browser.load(f"{dashboard.url}/hyperparams/{finished_run}")
        assert browser.wait_until("document.querySelectorAll('#params input').length === 5", PAGE_LIMIT_S)
        widths = browser.evaluate(WIDTHS)
        page = browser.evaluate("""(() => ({
            inputs: [...document.querySelectorAll('#params input')].map(i => i.getBoundingClientRect())
                .every(r => r.left >= 0 && r.right <= document.documentElement.clientWidth && r.width >= 80),
            labels: [...document.querySelectorAll('#params tr')][0].querySelector('input').closest('td').dataset.label}))()""")
        browser.screenshot(tmp_path / f"hyperparams-{width}.png")
    assert widths["inner"] == width and widths["tall"] and widths["scrollbar"] > 0, f"{widths}"
    assert widths["wide"] <= widths["fits"], f"{widths}"  # no sideways scrolling beside a classic scrollbar
    assert page["inputs"] and page["labels"] == "new value", page
