"""The local transport: worker processes on this machine, commands over a `multiprocessing.Pipe`,
observations, actions, rewards and done flags in one shared-memory block.

The Pipe carries only commands and small replies, and the hot path none of pickling: a STEP is a
few pre-encoded bytes, and "stepped, nothing to report" comes back as an empty message.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import select
import signal
import sys
import time
import traceback
import types
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.util import Finalize
from typing import Any

from game.atari import GameSpec
from game.vector.group import GameGroup, GroupArrays
from game.vector.pool import EnvPool, RestartPolicy
from game.vector.protocol import (
    NOTHING_TO_REPORT,
    Command,
    RemoteError,
    Reply,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
    decode_command,
    decode_reply,
    encode_command,
)
from game.vector.shared import Layout, SharedArrays

# Workers fork from a server that has imported only this module: no torch, no CUDA state, and no
# inherited copies of the trainer's Pipe ends (which would hide a dead trainer from them).
START_METHOD = "forkserver"
_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR


@dataclass
class _Process:
    process: Any  # multiprocessing.Process of the forkserver context
    conn: Connection


class PipePool(EnvPool):
    """Local worker processes, each holding `envs_per_worker` games."""

    def __init__(self, specs: Sequence[GameSpec], envs_per_worker: int = 1, timeout_s: float = 60.0,
                 start_timeout_s: float = 120.0, restarts: RestartPolicy | None = None) -> None:
        self._processes: dict[int, _Process] = {}
        self._context = mp.get_context("forkserver")  # START_METHOD, spelled out so type checkers know the context
        self._context.set_forkserver_preload(["game.vector.forkserver_preload", "game.vector.pipe"])
        # Workers ignore SIGTERM, so multiprocessing's own exit handler (SIGTERM every daemon child,
        # then join it) would wait forever on a pool nobody closed: kill them first (priority ≥ 0
        # runs before that handler).
        self._kill_at_exit = Finalize(self, _kill_processes, args=(self._processes.values(),), exitpriority=10)
        super().__init__(specs, envs_per_worker, timeout_s, start_timeout_s, restarts)

    def worker_pids(self) -> list[int]:
        return [self._processes[w].process.pid for w in range(self.n_workers)]

    def _allocate(self, observation_shape: tuple[int, ...]) -> GroupArrays:
        n = len(self.specs)
        self._layout = Layout.of(observations=((n, *observation_shape), "uint8"), actions=((n,), "int32"),
                                 rewards=((n,), "float32"), terminals=((n,), "bool"), truncations=((n,), "bool"))
        self._shared = SharedArrays(self._layout)
        return GroupArrays(*(self._shared[name] for name in GroupArrays._fields))

    def _start(self, worker: int) -> None:
        parent, child = self._context.Pipe(duplex=True)
        envs = self.envs_of(worker)
        process = self._context.Process(
            target=run_worker, args=(child, self.specs[envs], self._shared.name, self._layout, envs.start),
            name=f"game-worker-{worker}",
            daemon=True,  # a worker never outlives the trainer's interpreter (see `_kill_at_exit`)
        )
        with _main_module_hidden():
            process.start()
        child.close()  # only the worker holds its end now, so its death shows as EOF here
        self._processes[worker] = _Process(process, parent)

    def _send(self, worker: int, command: Command, payload: Any = None) -> None:
        try:
            self._processes[worker].conn.send_bytes(encode_command(command, payload))
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # a dead worker is reported by _gather, with its exit code

    def _gather(self, workers: Sequence[int], timeout_s: float) -> dict[int, Any]:
        """Waits with one `select.poll` over the Pipes and the process sentinels: it runs once per
        agent step, and `multiprocessing.connection.wait` (a new `selectors` object and a Python
        registration per handle on every call) cost more than half of the trainer's time here."""
        poller, owners = self._watch(workers)
        pending: set[int] = set(workers)
        values: dict[int, Any] = {}
        failures: list[Exception] = []

        def settle(w: int, failure: Exception | None = None) -> None:
            """Worker w is done for this request: stop watching it; record its failure."""
            pending.discard(w)
            for fd in (self._processes[w].conn.fileno(), self._processes[w].process.sentinel):
                if owners.pop(fd, None) is not None:
                    poller.unregister(fd)
            if failure is not None:
                failures.append(failure)

        deadline = time.monotonic() + timeout_s
        while pending:
            ready = poller.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000)))
            if not ready:
                failures.extend(WorkerTimeout(w, timeout_s) for w in sorted(pending))
                break
            for fd, _ in ready:
                if fd in owners:  # else: its worker was settled earlier in this batch
                    self._read(*owners[fd], settle, values)
        if failures:
            raise failures[0]
        return values

    def _watch(self, workers: Sequence[int]) -> tuple[select.poll, dict[int, tuple[int, bool]]]:
        """A poller over each worker's Pipe and process sentinel; fd -> (worker, is the sentinel)."""
        poller = select.poll()
        owners: dict[int, tuple[int, bool]] = {}
        for w in workers:
            owners[self._processes[w].conn.fileno()] = (w, False)
            owners[self._processes[w].process.sentinel] = (w, True)
        for fd in owners:
            poller.register(fd, _READABLE)
        return poller, owners

    def _read(self, w: int, is_sentinel: bool, settle: Any, values: dict[int, Any]) -> None:
        worker = self._processes[w]
        if is_sentinel:  # the process has exited; a reply it sent first is still read, via its Pipe
            if not worker.conn.poll():
                worker.process.join(0.1)
                settle(w, WorkerDied(w, worker.process.exitcode))
            return
        try:
            reply = decode_reply(worker.conn.recv_bytes())
        except (EOFError, OSError):
            worker.process.join(1.0)
            settle(w, WorkerDied(w, worker.process.exitcode))
            return
        settle(w, WorkerError(w, reply.error) if reply.error is not None else None)
        if reply.error is None:
            values[w] = reply.value

    def _stop(self, workers: Sequence[int], timeout_s: float) -> None:
        stopping = [self._processes[w] for w in workers if w in self._processes]
        for p in stopping:
            if p.process.is_alive():
                with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
                    p.conn.send_bytes(encode_command(Command.CLOSE))
        deadline = time.monotonic() + timeout_s
        for p in stopping:
            p.process.join(max(0.0, deadline - time.monotonic()))
        _kill_processes(stopping)  # the hung ones: SIGTERM is ignored by workers, so SIGKILL
        for p in stopping:
            p.conn.close()

    def _shutdown(self) -> None:
        self._kill_at_exit.cancel()
        self._shared.close()


def _kill_processes(processes: Iterable[_Process]) -> None:
    """SIGKILL, and reap, those still alive."""
    for p in processes:
        if p.process.is_alive():
            p.process.kill()
            p.process.join()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start children without re-importing the parent's `__main__` in them.

    multiprocessing re-imports the main module in every non-fork child. Workers need nothing from
    it (their target lives here), and importing it would pull torch into every worker
    (`python -m experiments.breakout`) or fail outright (a notebook, `python -`).
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


# ---- the worker process -------------------------------------------------------------------------

def run_worker(conn: Connection, specs: list[GameSpec], shm_name: str, layout: Layout, first_env: int) -> None:
    """Serve commands until CLOSE or until the trainer's end of the Pipe closes.

    Ignores SIGINT and SIGTERM (as the forkserver did before it, see `forkserver_preload`): a
    Ctrl-C in the terminal, `timeout` or a batch system signals the whole process group, and it is
    the trainer's job to checkpoint and then close its workers in order."""
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_IGN)
    _schedule_as_batch_job()
    shared = SharedArrays(layout, shm_name)
    group: GameGroup | None = None
    try:
        try:
            span = slice(first_env, first_env + len(specs))
            group = GameGroup(specs, first_env, GroupArrays(*(shared[name][span] for name in GroupArrays._fields)))
            conn.send(Reply(value=group.info()))
        except Exception as e:
            conn.send(Reply(error=_remote_error(e)))
            return
        _serve(conn, group)
    finally:
        if group is not None:
            group.close()
        shared.close()


def _serve(conn: Connection, group: GameGroup) -> None:
    while True:
        try:
            command, payload = decode_command(conn.recv_bytes())
        except (EOFError, OSError):
            return  # the trainer is gone: nobody to serve
        if command is Command.CLOSE:
            conn.send(Reply())
            return
        try:
            value = group.handle(command, payload)
        except Exception as e:
            conn.send(Reply(error=_remote_error(e)))
            continue
        if command in (Command.STEP, Command.PING) and value is None:
            conn.send_bytes(NOTHING_TO_REPORT)  # the common case: no pickle at all
        else:
            conn.send(Reply(value=value))


def _schedule_as_batch_job() -> None:
    """Ask Linux to treat this process as a throughput job (SCHED_BATCH, same priority).

    The trainer wakes every worker once per step. A normal woken task may preempt the task that
    woke it, so the trainer, mid-way through sending its commands, loses the core to the first
    worker it woke. A batch task never preempts on wake-up: the trainer finishes sending, and the
    workers run as soon as a core is free (docs/benchmarks.md, "What each choice in the loop buys").
    Needs no privilege; elsewhere it is skipped."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def _remote_error(e: BaseException) -> RemoteError:
    return RemoteError(type(e).__name__, str(e), traceback.format_exc())
