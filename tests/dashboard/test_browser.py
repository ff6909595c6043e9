"""The real front-end in a real browser: the run page shows the run and draws its metric chart."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser
from dashboard_support import Dashboard

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")

# Set to copy the run page's screenshot somewhere (e.g. for the README).
SCREENSHOT_ENV = "DASHBOARD_SCREENSHOT"
PAGE_LIMIT_S = 60.0


def test_run_page_renders_with_local_libraries(dashboard: Dashboard, finished_run: str, tmp_path: Path,
                                               no_leftover_processes: None) -> None:
    with Browser(tmp_path / "chromium-profile") as browser:
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


def test_hyperparameter_page_lists_the_live_values(dashboard: Dashboard, finished_run: str, tmp_path: Path,
                                                   no_leftover_processes: None) -> None:
    with Browser(tmp_path / "chromium-profile", height=700) as browser:
        browser.load(f"{dashboard.url}/hyperparams/{finished_run}")
        listed = browser.wait_until("document.querySelectorAll('#params input').length === 5", PAGE_LIMIT_S)
        names = browser.evaluate("[...document.querySelectorAll('#params input')].map(i => i.name).join(',')")
        # Submitting an out-of-range value shows the server's reason and queues nothing.
        browser.evaluate("document.querySelector('input[name=learning_rate]').value = '0.5';"
                         "document.getElementById('form').requestSubmit()")
        refused = browser.wait_until("document.getElementById('message').className === 'error'", PAGE_LIMIT_S)
        message = browser.evaluate("document.getElementById('message').textContent")
        browser.screenshot(tmp_path / "hyperparams-page.png")
    assert listed, "the hyperparameter page never listed the parameters"
    assert names == "clip_range,entropy_coef,epochs,learning_rate,value_coef"
    assert refused and "outside the allowed range" in message
    _status, info = dashboard.request("GET", f"/api/v1/hyperparams/{finished_run}")
    assert info["params"]["learning_rate"]["pending"] is None
