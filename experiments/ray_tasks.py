"""Runs as Ray tasks, for the sweep (a trial each) and the population (a member's segment each).

Each run gets a fresh worker process (`max_calls=1`): labml keeps its experiment, tracker and
logger in process-wide singletons, so a second run in the same process would report into the
first one's. A run whose process or node is lost is run again by Ray up to `max_retries` times
(and goes on from its checkpoint, experiments/run/plan.py); an exception of its own is not retried.
A Ctrl-C asks every running run to stop as a person's Ctrl-C asks a training run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_task(ray: Any, run: Callable[..., Any], num_cpus: float, max_retries: int) -> Any:
    """`run` as a Ray task of `num_cpus` logical CPUs, each call in a process of its own."""
    return ray.remote(max_calls=1)(run).options(num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False)


def stop_gently(ray: Any, running: list[Any]) -> None:
    """Every running task asked to stop as Ctrl-C asks a run (ray.cancel without force raises
    SIGINT's handler in its process: it finishes its update, checkpoints and returns), and waited
    for; a Ctrl-C meanwhile stops them at once."""
    for ref in running:
        ray.cancel(ref, force=False)
    try:
        ray.wait(running, num_returns=len(running))
    except KeyboardInterrupt:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
