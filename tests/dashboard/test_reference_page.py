"""The options reference reads at a laptop's and at a phone's width, in a real browser: the built
page (`mkdocs build --strict`) keeps every option name on one line and nothing wider than the screen.

Set REFERENCE_SCREENSHOTS=docs/images to keep the two screenshots docs/dashboard.md shows."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser, Chromium

from configs.cli import build_parser
from configs.ppo import PPOConfig

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS_ENV = "REFERENCE_SCREENSHOTS"
PAGE_LIMIT_S = 30.0

# Every code span that starts with a dash is an option name: how many lines each is drawn on.
SPLIT_OPTIONS = """[...document.querySelectorAll('.rst-content code')]
    .filter(c => c.textContent.startsWith('-') && c.getClientRects().length !== 1).map(c => c.textContent)"""
# Anything of the page's text drawn past the screen's right edge, a table scrolled inside its box included.
PAST_THE_EDGE = """[...document.querySelectorAll('.rst-content *')]
    .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
    .map(e => e.tagName + ': ' + e.textContent.slice(0, 40))"""
OPTION_TERMS = "[...document.querySelectorAll('.rst-content dt code')].map(c => c.textContent.split(' ')[0])"


@pytest.fixture(scope="module")
def reference_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("mkdocs", reason='mkdocs is not installed (pip install -e ".[dev]")')
    site = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=REPO, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    return (site / "reference" / "index.html").as_uri()


@pytest.mark.parametrize(("width", "height", "phone"), [(1280, 900, False), (390, 844, True)])
def test_the_reference_fits_the_screen_and_keeps_option_names_whole(
        reference_page: str, width: int, height: int, phone: bool, chromium: Chromium) -> None:
    options = [a.option_strings[0] for a in build_parser("x", "")._actions if a.dest in PPOConfig.__dataclass_fields__]
    with chromium.tab(width=width, height=height) as browser:
        # A phone: its viewport, and the page laid out for it (the theme's narrow layout).
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": phone})
        browser.load(reference_page)
        assert browser.wait_until("document.readyState === 'complete' && document.fonts.status === 'loaded'",
                                  PAGE_LIMIT_S)
        terms = browser.evaluate(OPTION_TERMS)
        split = browser.evaluate(SPLIT_OPTIONS)
        past = browser.evaluate(PAST_THE_EDGE)
        widths = browser.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        if os.environ.get(SCREENSHOTS_ENV):
            keep_screenshot(browser, Path(os.environ[SCREENSHOTS_ENV]) / f"reference-{width}px.png")
    assert split == [], f"option names drawn over two lines at {width} px: {split}"
    assert past == [], f"drawn past the right edge at {width} px: {past[:10]}"
    assert widths[0] <= widths[1], f"the page scrolls sideways at {width} px: {widths}"
    # One definition per option, its name the term.
    assert sorted(t for t in terms if t.startswith("--")) == sorted(["--help", "--version", "--resume", *options])


def keep_screenshot(browser: Browser, path: Path) -> None:
    """The screen from the section with the live options of the losses on, as a small PNG."""
    import base64

    from PIL import Image

    browser.evaluate("document.getElementById('ppo-losses-and-optimiser').scrollIntoView()")
    image = Image.open(io.BytesIO(base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"})["data"])))
    image.convert("RGB").quantize(colors=64).save(path, format="PNG", optimize=True)
