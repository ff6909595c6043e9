"""Rates timed on the clock, for the measuring commands (the benchmark, tools/node_crossing.py): a
module of its own, light to import (no torch), so a command that times only workers loads nothing more."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def timed_rate(fn: Callable[[], Any], units_per_call: float, duration: float, warmup_s: float,
               min_calls: int = 1, sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Call `fn` for `warmup_s` (at least once), then for `duration` seconds (at least
    `min_calls` times) timed with `perf_counter`; returns units/s over the timed calls."""
    start = time.perf_counter()
    while True:
        fn()
        sync()
        if time.perf_counter() - start >= warmup_s:
            break
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        sync()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= duration and calls >= min_calls:
            break
    return {"rate": calls * units_per_call / elapsed, "calls": calls, "seconds": elapsed}


def warmup_seconds(duration: float) -> float:
    return min(2.0, 0.25 * duration)
