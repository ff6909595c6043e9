"""A population's private dashboard, and its members' segments on Ray.

The population's folder holds `population.json` (the members, the settings, the generations done:
experiments/pbt/state.py), `lineage.csv`, `lineage.png` and, unless `--dashboard` names one,
`dashboard/`: the data of the dashboard this command starts for the members' live channel, kept so
that changes still queued there reach the members when the population is resumed. Every file of
ours in it is written without following a link (`experiments.run.safe_files.open_own_file`,
or replaced whole by rename).
"""

from __future__ import annotations

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
from experiments.ray_tasks import Scheduled, TaskEnd, remote_task, run_member, run_tasks
from experiments.run.safe_files import open_own_file
from ray_setup.connection import RayConnection

REPO = Path(__file__).resolve().parents[2]


def run_segment(connection: RayConnection, population: Population, target: int, queue: Callable[[int, dict[str, Any]], bool],
                log: Callable[[str], None]) -> tuple[Scheduled, dict[int, str | None]]:
    """Every member to update `target`, in parallel, as Ray tasks (experiments/ray_tasks.py: how the
    loop ends, a person's stop included); returns that ending and {member: why it failed, or None}
    for each member that ended.

    The dashboard takes a live change only for a run that is running, so a member's explored values
    are queued (`queue(member, values)`: True once taken, or given up) while its segment runs."""
    task = remote_task(connection.ray, run_member, population.cpus_per_member, population.max_retries)
    failures: dict[int, str | None] = {}
    calls = []
    for member, spec in enumerate(population.members):
        summary = population.summary(member)
        if summary.get("status") not in (None, "running") and summary.get("updates", 0) >= target:
            failures[member] = None  # it got there before the population was stopped
            continue
        overrides = {**population.fixed, "seed": spec["seed"], "stop_after_env_steps": target * population.batch_size}
        calls.append((member, (overrides, spec["run_uuid"], f"population {population.path.name} member {member}")))

    def ended(end: TaskEnd) -> None:
        result = end.summary
        failures[end.key] = (end.error if result is None else
                             None if result["exit_code"] == 0 else f"{result['status']}: {result.get('error')}")
        where = f" (node {result['node_name']})" if result is not None and result.get("node_name") else ""
        log(f"  member {end.key}{where}: {'at update ' + str(target) if failures[end.key] is None else 'failed: ' + str(failures[end.key])}")

    def hand_out(running: frozenset[int]) -> bool:
        """The values queued for running members, offered to the dashboard; whether some still wait."""
        for member in sorted(running & {int(m) for m in population.unqueued}):
            if queue(member, population.unqueued[str(member)]):
                del population.unqueued[str(member)]
                population.save()
        return bool(running & {int(m) for m in population.unqueued})

    return run_tasks(connection, task, calls, len(calls), ended, hand_out), failures


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
