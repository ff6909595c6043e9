"""A population's private dashboard, and its members' segments on Ray.

The population's folder holds `population.json` (the members, the settings, the generations done:
experiments/pbt/state.py), `lineage.csv`, `lineage.png` and, unless `--dashboard` names one,
`dashboard/`: the data of the dashboard this command starts for the members' live channel, kept so
that changes still queued there reach the members when the population is resumed. Every file of
ours in it is written without following a link (`experiments.run.folder_checks.open_own_file`,
or replaced whole by rename).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from configs.terminal import escaped
from experiments.pbt.state import Population
from experiments.ray_tasks import run_task, stop_gently
from experiments.run.folder_checks import UnsafeRunFolder, open_own_file
from experiments.shared_data_dir import DataDirNotShared, check_data_dir_seen, refusal_in
from experiments.sweep import run_trial
from game.vector.ray_cluster import head_lost

REPO = Path(__file__).resolve().parents[2]


def run_member(overrides: dict[str, Any], run_uuid: str, label: str) -> dict[str, Any]:
    """One member's segment (a Ray task in a fresh process): resume the run, or start it, until
    `stop_after_env_steps`. The process of its previous segment may still be exiting after it
    returned; the run is resumed once that process has let go of it. `label` names it on the dashboard."""
    check_data_dir_seen(overrides["data_dir"])  # first: a node that cannot see it refuses, having written nothing
    from experiments.run.folders import RunFolder

    folder = RunFolder.named(Path(overrides["data_dir"]), run_uuid, "run_uuid")
    deadline = time.monotonic() + 120  # past it, the resume refuses in one line (naming the process)
    with contextlib.suppress(UnsafeRunFolder):  # an unsafe folder: refused below, in the plan's one line
        while folder is not None and folder.check() not in (None, os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the previous segment's process ends by itself
    return run_trial(overrides, run_uuid, label)  # planned as every run is (experiments/run/plan.py)


def run_segment(population: Population, target: int, queue: Callable[[int, dict[str, Any]], bool],
                log: Callable[[str], None]) -> dict[int, str | None]:
    """Run every member to update `target` on Ray, in parallel; {member: why it failed, or None}.

    The dashboard takes a live change only for a run that is running, so a member's explored values
    are queued (`queue(member, values)`: True once taken, or given up) while its segment runs.

    Ctrl-C (KeyboardInterrupt here): each running member is asked to stop as a person's Ctrl-C
    asks a run (ray.cancel without force raises SIGINT's handler in the member's process: it
    finishes its update and checkpoints); a second Ctrl-C stops them at once.
    """
    import ray

    task = run_task(ray, run_member, population.cpus_per_member, population.max_retries)
    running: dict[Any, int] = {}
    failures: dict[int, str | None] = {}
    for member, spec in enumerate(population.members):
        summary = population.summary(member)
        if summary.get("status") not in (None, "running") and summary.get("updates", 0) >= target:
            failures[member] = None  # it got there before the population was stopped
            continue
        overrides = {**population.fixed, "seed": spec["seed"], "stop_after_env_steps": target * population.batch_size}
        running[task.remote(overrides, spec["run_uuid"], f"population {population.path.name} member {member}")] = member
    try:
        while running:
            for member in set(running.values()) & {int(m) for m in population.unqueued}:
                if queue(member, population.unqueued[str(member)]):
                    del population.unqueued[str(member)]
                    population.save()
            waiting = bool(set(running.values()) & {int(m) for m in population.unqueued})
            done, _ = ray.wait(list(running), num_returns=1, timeout=0.05 if waiting else None)
            if not done:
                continue
            member = running.pop(done[0])
            try:
                result = ray.get(done[0])
                failures[member] = None if result["exit_code"] == 0 else f"{result['status']}: {result.get('error')}"
            except ray.exceptions.RayError as e:  # it raised, or its process was lost more than max_retries times
                if (refusal := refusal_in(e)) is not None:  # its node cannot see --data-dir: the others are stopped
                    stop_gently(ray, list(running))
                    raise DataDirNotShared(refusal) from None
                failures[member] = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            log(f"  member {member}: {'at update ' + str(target) if failures[member] is None else 'failed: ' + str(failures[member])}")
    except KeyboardInterrupt:
        if not head_lost():  # a lost head took the members with it: none is left to ask
            stop_gently(ray, list(running))  # each asked to stop and checkpoint; at a second Ctrl-C, stopped at once
        raise
    return failures


def _ends_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent SIGTERM when this process dies, however it dies (a
    SIGKILL included): Linux's parent-death signal. The C function is looked up here, in the parent,
    so the child between fork and exec only calls it; a parent already gone by then ends the child.
    None where there is no prctl (not Linux): the child outlives a killed parent there."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent, set_parent_death_signal = os.getpid(), 1  # PR_SET_PDEATHSIG

    def preexec() -> None:
        prctl(set_parent_death_signal, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)
    return preexec


class PrivateDashboard:
    """`python -m experiments.dashboard` on a free local port with its data in the population's
    folder, in a session of its own (a Ctrl-C to the population must not stop the channel the
    members checkpoint through); stopped with SIGTERM when the population ends, and by the kernel
    when the population's process dies without ending it (`kill -9`), so that `pbt --resume` finds
    its data folder free."""

    def __init__(self, data: Path, runs_dir: Path) -> None:
        self.data, self.runs_dir = data, runs_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.asked = False  # to stop (SIGTERM sent)
        self.url = ""

    def __enter__(self) -> PrivateDashboard:
        try:
            return self._start()
        except BaseException:  # a Ctrl-C while it starts, too: never leave it running
            self.__exit__()
            raise

    def _start(self) -> PrivateDashboard:
        self.data.mkdir(parents=True, exist_ok=True)
        log = self.data / "dashboard.log"
        for _ in range(3):  # another program may take the free port first
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            # A new file each time (the old name removed, never followed), read back through the
            # same descriptor: nothing put in its place is written to or read.
            log.unlink(missing_ok=True)
            fd = open_own_file(log, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            try:
                self.process = subprocess.Popen([sys.executable, "-m", "experiments.dashboard", "--port", str(port),
                                                 "--data", str(self.data), "--runs-dir", str(self.runs_dir)],
                                                cwd=REPO, stdout=fd, stderr=subprocess.STDOUT, start_new_session=True,
                                                preexec_fn=_ends_with_parent())
                while self.process.poll() is None and b"Dashboard running at" not in os.pread(fd, 1 << 16, 0):
                    time.sleep(0.05)
                said = os.pread(fd, 1 << 16, max(0, os.fstat(fd).st_size - (1 << 16))).decode(errors="replace").strip().splitlines()
            finally:
                os.close(fd)
            if self.process.poll() is None:
                self.url = f"http://127.0.0.1:{port}"
                return self
        raise RuntimeError(f"the population's dashboard did not start: {escaped(said[-1] if said else '(it said nothing)')}")

    def ask_to_stop(self) -> None:
        """SIGTERM, once (a second one cuts its graceful stop short), without waiting: its shutdown
        then overlaps whatever the population stops next."""
        if self.process is not None and not self.asked and self.process.poll() is None:
            self.process.terminate()
            self.asked = True

    def __exit__(self, *exc: object) -> None:
        self.ask_to_stop()
        if self.process is not None:
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
