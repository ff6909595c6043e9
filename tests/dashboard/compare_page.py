"""Driving the comparison page as a person does (a real mouse, the page's own export links), and
asking its API, for test_compare.py and test_compare_query.py."""

from __future__ import annotations

import csv
import io
import time
from typing import Any
from urllib.parse import quote, unquote

from browser import Browser
from dashboard_support import Dashboard

PAGE_LIMIT_S = 60.0

# The first ten colours of the page's palette, in its order (compare.js COLORS).
HASHED_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf"]


def compare(dashboard: Dashboard, runs: list[str], metric: str | None = None) -> tuple[int, Any]:
    """`GET /api/v1/compare` of `runs` (and `metric`): (status, answer)."""
    query = f"runs={','.join(runs)}" + ("" if metric is None else f"&metric={quote(metric)}")
    return dashboard.request("GET", f"/api/v1/compare?{query}")


def fnv1a(text: str) -> int:
    """The 32-bit FNV-1a hash the page picks a run's colour with."""
    h = 0x811C9DC5
    for c in text:
        h = ((h ^ ord(c)) * 0x01000193) & 0xFFFFFFFF
    return h


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


def point_at(browser: Browser, metric: str, run: str, index: int) -> tuple[float, float]:
    """Where the `index`-th point of `run`'s curve in `metric`'s chart is on the screen."""
    x, y = browser.evaluate(
        f"(() => {{ const svg = document.querySelector('.compare-chart[data-metric=\"{metric}\"] svg');"
        f" const p = svg.querySelector('.curve[data-run=\"{run}\"]').getAttribute('points').split(' ')[{index}]"
        ".split(',').map(Number); const r = svg.getBoundingClientRect(); return [r.left + p[0], r.top + p[1]]; })()")
    return x, y


def mouse(browser: Browser, kind: str, x: float, y: float) -> None:
    browser.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                              "buttons": 1 if kind != "mouseReleased" else 0, "clickCount": 1})


def exported_csv(browser: Browser, metric: str) -> list[dict[str, str]]:
    href = browser.evaluate(f"document.querySelector('.compare-chart[data-metric=\"{metric}\"] a.export-csv').href")
    assert href.startswith("data:text/csv;charset=utf-8,"), href[:80]
    return list(csv.DictReader(io.StringIO(unquote(href.split(",", 1)[1]))))


def ema(values: list[float], weight: float) -> list[float]:
    """Smoothing as TensorBoard's: an exponential moving average, debiased at the start."""
    out, last = [], 0.0
    for i, v in enumerate(values):
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight ** (i + 1)))
    return out
