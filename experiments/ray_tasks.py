"""Runs as Ray tasks, and the one loop that runs them: a sweep's trials and a population's segments.

Each run gets a fresh worker process (`max_calls=1`): labml keeps its experiment, tracker and
logger in process-wide singletons, so a second run in the same process would report into the
first one's. A run whose process or node is lost is run again by Ray up to `max_retries` times
(and goes on from its checkpoint, experiments/run/plan.py); an exception of its own is not retried.

`run_tasks` submits to a limit and waits in slices, and ends in one of four ways (`Ending`):
every task ended; a person stopped it (Ctrl-C or SIGTERM: every running task is asked to stop at
its checkpoint, as a person's Ctrl-C asks a training run, and waited for; a second Ctrl-C forces);
the cluster's head was lost (its tasks went with it: nothing is asked of them, and a stop that was
waiting for them ends as a lost head, whose line says how to go on); or a task's node
could not see the data folder (the others are asked to stop, as by a person: no node will fare
better). Nothing is raised for any of these: the caller reads the ending and the ends.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configs.machine import shared_cores_environment
from experiments.shared_data_dir import check_data_dir_seen, refusal_in
from ray_setup.connection import RayConnection
from ray_setup.errors import cause_line

WAIT_SLICE_S = 0.5  # a lost head is seen within this, and within the watch's own period
QUICK_SLICE_S = 0.05  # while something waits to be handed to a running task (a member's queued values)


# ---- the runs (each in a Ray worker process) ---------------------------------------------------

def run_trial(overrides: dict[str, Any], run_uuid: str, label: str | None = None) -> dict[str, Any]:
    """A full labml run with `overrides`, as the `uuid` run, named on the dashboard by `label`
    (its sweep and trial, or its population and member); resumes it if a checkpoint exists (Ray
    re-ran this trial after its node or process was lost), and starts it afresh in its own folder
    otherwise (experiments/run/plan.py). Returns the run's summary."""
    check_data_dir_seen(overrides["data_dir"])  # before anything is written: a node that cannot see it refuses
    from experiments.run.lifecycle import TrainingRun
    from experiments.run.plan import plan_launch

    plan = plan_launch(overrides, run_uuid=run_uuid, label=label)
    result = TrainingRun(plan).run()
    return {**result.summary, "exit_code": result.exit_code, "host": os.uname().nodename, "resumed": plan.resume is not None}


def run_member(overrides: dict[str, Any], run_uuid: str, label: str) -> dict[str, Any]:
    """One member's segment: its run resumed (or started) until `stop_after_env_steps`. The process
    of its previous segment may still be exiting after it returned; the run is resumed once that
    process has let go of it (its folder's lock names no live process), within 120 s."""
    check_data_dir_seen(overrides["data_dir"])  # first: a node that cannot see it refuses, having written nothing
    from experiments.run.folders import RunFolder
    from experiments.run.safe_files import UnsafeRunFolder

    folder = RunFolder.named(Path(overrides["data_dir"]), run_uuid, "run_uuid")
    deadline = time.monotonic() + 120  # past it, the resume refuses in one line (naming the process)
    with contextlib.suppress(UnsafeRunFolder):  # an unsafe folder: refused below, in the plan's one line
        owner = folder.check() if folder is not None else None  # the whole walk once; then its run.pid alone
        while folder is not None and owner not in (None, os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the previous segment's process ends by itself
            owner = folder.owner()
    return run_trial(overrides, run_uuid, label)


# ---- the connection (on the driver) -------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
# What a cluster's nodes are not sent of this checkout (its code travels with the job: working_dir).
EXCLUDES = [".git", ".venv", "venv", "runs", "docs", "tests", "**/__pycache__", "*.egg-info"]


def connection_for(address: str | None, cpus_per_task: float, env: dict[str, str]) -> RayConnection:
    """A driver's connection for tasks of `cpus_per_task` CPUs (a sweep's trials, a population's
    members), each task with `env`: a cluster at `address`, or a private Ray with room for ≥ 1."""
    # Tasks share a node's cores: their idle torch threads sleep rather than spin (configs/machine.py).
    env = {**shared_cores_environment(), **env}
    if address is None:
        return RayConnection(None, max(os.cpu_count() or 1, math.ceil(cpus_per_task)), env)
    # The cluster's nodes need the same Python environment; this checkout's code travels with the
    # job, so every task runs the driver's version of it (without what EXCLUDES names).
    return RayConnection(address, env=env, runtime_env={"working_dir": str(REPO), "excludes": EXCLUDES})


# ---- the loop (on the driver) --------------------------------------------------------------------

class Ending(enum.Enum):
    DONE = "every task ended"
    STOPPED = "stopped by a person"
    HEAD_LOST = "the cluster's head was lost"
    DATA_DIR_REFUSED = "a node cannot see the data folder"


@dataclass(frozen=True)
class TaskEnd:
    """How one task ended: its run's summary, or Ray's error in one line (it raised, or its process
    or node was lost more than its retries allow). `stopped`: asked to stop by the loop."""

    key: int
    summary: dict[str, Any] | None
    error: str | None = None
    stopped: bool = False


@dataclass(frozen=True)
class Scheduled:
    ending: Ending
    ends: tuple[TaskEnd, ...]  # in the order the tasks ended
    refusal: str | None = None  # DATA_DIR_REFUSED: the node's line
    refused: int | None = None  # DATA_DIR_REFUSED: the key of the task whose node gave it


def remote_task(ray: Any, run: Callable[..., Any], num_cpus: float, max_retries: int) -> Any:
    """`run` as a Ray task of `num_cpus` logical CPUs, each call in a process of its own."""
    return ray.remote(max_calls=1)(run).options(num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False)


def run_tasks(connection: RayConnection, task: Any, calls: Sequence[tuple[int, tuple[Any, ...]]], limit: int,
              on_end: Callable[[TaskEnd], None] = lambda end: None,
              between_waits: Callable[[frozenset[int]], bool] = lambda running: False) -> Scheduled:
    """`task.remote(*args)` for each (key, args) of `calls`, at most `limit` at once; `on_end` is told
    of each end as it comes, `between_waits` (given the keys running) is called between waits and
    returns whether to look again soon. See the module's docstring for how it ends."""
    ray = connection.ray
    queue = list(calls)
    running: dict[Any, int] = {}  # Ray's ref -> key
    ends: list[TaskEnd] = []
    try:
        while queue or running:
            if connection.head_lost:  # checked before a submission too, which would wait on the dead head
                return Scheduled(Ending.HEAD_LOST, tuple(ends))
            while queue and len(running) < limit:
                key, args = queue.pop(0)
                running[task.remote(*args)] = key
            quick = between_waits(frozenset(running.values()))
            done, _ = ray.wait(list(running), num_returns=1, timeout=QUICK_SLICE_S if quick else WAIT_SLICE_S)
            if not done:
                continue
            end, refusal = _end_of(ray, running.pop(done[0]), done[0])
            if refusal is not None:  # told in the ending, not to `on_end`
                ends += [end, *_stop(connection, running)]
                return Scheduled(Ending.DATA_DIR_REFUSED, tuple(ends), refusal, end.key)
            if end.error is not None and connection.lost_now():  # its node went with the head: lost, not failed
                return Scheduled(Ending.HEAD_LOST, tuple(ends))
            ends.append(end)
            on_end(end)
    except KeyboardInterrupt:
        if not connection.head_lost:  # a lost head took its tasks with it: none is left to ask
            ends += _stop(connection, running)
        # A head lost before or during the stop is the ending to tell: its line says how to go on.
        return Scheduled(Ending.HEAD_LOST if connection.head_lost else Ending.STOPPED, tuple(ends))
    return Scheduled(Ending.DONE, tuple(ends))


def _end_of(ray: Any, key: int, ref: Any, stopped: bool = False) -> tuple[TaskEnd, str | None]:
    try:
        return TaskEnd(key, ray.get(ref), stopped=stopped), None
    except ray.exceptions.RayError as e:
        refusal = refusal_in(e)
        return TaskEnd(key, None, refusal or cause_line(e), stopped=stopped), refusal


def _stop(connection: RayConnection, running: dict[Any, int]) -> list[TaskEnd]:
    """Every running task asked to stop as Ctrl-C asks a run (`ray.cancel` without force raises
    SIGINT's handler in its process: it finishes its update, checkpoints and returns), and waited
    for in slices; a Ctrl-C meanwhile stops them at once. Returns how each ended; those the cluster's
    head took with it while they stopped have no end to read (a `ray.get` would wait on the head)."""
    ray = connection.ray
    refs = list(running)
    for ref in refs:
        ray.cancel(ref, force=False)
    waiting = refs
    try:
        while waiting and not connection.head_lost:
            _, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=WAIT_SLICE_S)
    except KeyboardInterrupt:
        for ref in waiting:
            ray.cancel(ref, force=True)
        waiting = []
    return [_end_of(ray, running[ref], ref, stopped=True)[0] for ref in refs if ref not in waiting]
