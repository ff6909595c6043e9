"""Many games stepped together: the trainer's only view of the environment.

`EnvPool` is the interface; `PipePool` runs the games in local worker processes, each holding
`envs_per_worker` games, talking over a `multiprocessing.Pipe` with observations in shared memory.
Another transport (a cluster engine) implements the same interface; the trainer never knows which.

Lifecycle rules, because a pool that hangs or leaks processes loses a day of training:
* every wait is bounded (`timeout_s`) and also watches the process sentinels, so a dead worker is
  noticed at once rather than by a hang on its Pipe;
* `close()` asks each worker to exit, joins with a deadline, and terminates (then kills) only what
  is still alive after it; it is idempotent and safe after any error.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import select
import sys
import time
import types
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from game.atari import FRAME_SIZE, EpisodeStats, GameSpec
from game.protocol import Command, PoolError, WorkerDied, WorkerError, WorkerTimeout, decode_reply, encode_command
from game.shared import Layout, SharedArrays
from game.worker import run_worker

__all__ = ["EnvPool", "PipePool", "PoolError", "StepBatch", "WorkerDied", "WorkerError", "WorkerTimeout"]

# Workers fork from a server that has imported only this package: no torch, no CUDA state,
# and no inherited copies of the trainer's Pipe ends (which would hide a dead trainer from them).
START_METHOD = "forkserver"
_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start children without re-importing the parent's `__main__` in them.

    multiprocessing re-imports the main module in every non-fork child. Workers need nothing from
    it (their target lives in `game.worker`), and importing it would pull torch into every worker
    (`python -m experiments.breakout`) or fail outright (a notebook, `python -`).
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


@dataclass
class StepBatch:
    """One step of every env. The arrays are views into shared memory, valid until the next step."""

    rewards: np.ndarray  # (n_envs,) float32, the learner's (clipped) reward
    terminals: np.ndarray  # (n_envs,) bool, life lost or game over
    truncations: np.ndarray  # (n_envs,) bool, time limit reached
    episodes: list[tuple[int, EpisodeStats]] = field(default_factory=list)  # (env index, finished game)
    final_observations: dict[int, np.ndarray] = field(default_factory=dict)  # env index -> truncated obs


class EnvPool(ABC):
    """`n_envs` games; `observations[i]` is env i's current (frame_stack, 84, 84) uint8 observation."""

    n_envs: int
    n_actions: int
    action_meanings: list[str]
    observations: np.ndarray

    @abstractmethod
    def reset(self) -> np.ndarray:
        """Start a new game in every env; returns `observations`."""

    n_workers: int

    def step(self, actions: np.ndarray) -> StepBatch:
        """Apply one action per env; `observations` then holds the next observations."""
        every = range(self.n_workers)
        self.step_async(actions, every)
        return self.step_wait(every)

    @abstractmethod
    def step_async(self, actions: np.ndarray, workers: range) -> None:
        """Start stepping the envs of `workers` (a contiguous range of worker indices)."""

    @abstractmethod
    def step_wait(self, workers: range) -> StepBatch:
        """Finish the step `step_async` started for `workers`; a batch of their envs only."""

    @abstractmethod
    def restart_worker(self, index: int, seed_offset: int) -> None:
        """Replace a failed worker; its games restart with seeds shifted by `seed_offset`."""

    @abstractmethod
    def drain(self) -> None:
        """Settle requests still in flight after a failure, so every worker takes new commands."""

    # Shared by the implementations: the specs they start from, the envs of a worker range, and
    # the batch a step returns.
    specs: list[GameSpec]
    envs_per_worker: int
    timeout_s: float
    _batch: StepBatch  # views of every env's reward/terminal/truncation, refreshed by each step

    def _take_specs(self, specs: Sequence[GameSpec], envs_per_worker: int, timeout_s: float) -> None:
        """Check that `specs` split into workers of `envs_per_worker` games, and keep them."""
        if not specs or len(specs) % envs_per_worker:
            raise ValueError(f"{len(specs)} envs do not split into workers of {envs_per_worker}")
        self.specs = list(specs)
        self.n_envs = len(specs)
        self.envs_per_worker = envs_per_worker
        self.timeout_s = timeout_s

    def _envs_of(self, workers: range) -> slice:
        return slice(workers.start * self.envs_per_worker, workers.stop * self.envs_per_worker)

    def _step_batch(self, workers: range, worker_events: Iterable[Any]) -> StepBatch:
        """The batch for `workers`' envs, with the rare events (finished games, truncated
        observations) their workers reported; each item of `worker_events` is None or
        (list of (env, EpisodeStats), {env: final observation})."""
        envs = self._envs_of(workers)
        if envs == slice(0, self.n_envs):
            batch = self._batch
        else:
            batch = StepBatch(self._batch.rewards[envs], self._batch.terminals[envs], self._batch.truncations[envs])
        batch.episodes = []
        batch.final_observations = {}
        for events in worker_events:
            if events is not None:
                batch.episodes.extend(events[0])
                batch.final_observations.update(events[1])
        return batch

    @abstractmethod
    def get_state(self) -> list[dict[str, Any]]:
        """Each env's full state (emulator included), for an exact resume."""

    @abstractmethod
    def set_state(self, states: list[dict[str, Any]]) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Stop every worker; idempotent; leaves no process behind."""

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Worker:
    process: Any  # multiprocessing.Process of the chosen context
    conn: Connection
    envs: range
    info: dict[str, Any] = field(default_factory=dict)
    awaiting: bool = False  # a request was sent and its reply not read yet


class PipePool(EnvPool):
    """Local worker processes; `specs[i]` builds env i; `envs_per_worker` games per process."""

    def __init__(
        self,
        specs: Sequence[GameSpec],
        envs_per_worker: int = 1,
        timeout_s: float = 60.0,
        start_timeout_s: float = 120.0,
    ) -> None:
        self._take_specs(specs, envs_per_worker, timeout_s)
        self._closed = False
        self._workers: list[_Worker] = []
        stack = specs[0].frame_stack
        self._layout = Layout.of(
            observations=((self.n_envs, stack, FRAME_SIZE, FRAME_SIZE), "uint8"),
            actions=((self.n_envs,), "int32"),
            rewards=((self.n_envs,), "float32"),
            terminals=((self.n_envs,), "bool"),
            truncations=((self.n_envs,), "bool"),
        )
        self._shared = SharedArrays(self._layout)
        self.observations = self._shared["observations"]
        self._actions = self._shared["actions"]
        self._batch = StepBatch(self._shared["rewards"], self._shared["terminals"], self._shared["truncations"])
        self._context = mp.get_context(START_METHOD)
        self._context.set_forkserver_preload(["game.worker"])
        try:
            for w in range(self.n_envs // envs_per_worker):
                envs = range(w * envs_per_worker, (w + 1) * envs_per_worker)
                self._workers.append(self._spawn(envs))
            for w in range(self.n_workers):
                self._await_start(w, start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.n_actions = self._workers[0].info["n_actions"]
        self.action_meanings = self._workers[0].info["action_meanings"]

    def _await_start(self, index: int, timeout_s: float, attempts: int = 3) -> None:
        """Wait for worker `index` to report ready; a worker that dies while starting (killed, out
        of memory) is started again, up to `attempts` times, before the failure is raised."""
        for attempt in range(attempts):
            try:
                self._workers[index].info = self._gather([index], timeout_s)[0]
                return
            except (WorkerDied, WorkerTimeout):
                if attempt == attempts - 1:
                    raise
                self._stop([self._workers[index]], timeout_s=1.0)
                self._workers[index] = self._spawn(self._workers[index].envs)

    @property
    def n_workers(self) -> int:
        return len(self._workers)

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def worker_info(self) -> list[dict[str, Any]]:
        return self._request_all(Command.INFO)

    # -- the EnvPool interface ----------------------------------------------------------------

    def reset(self) -> np.ndarray:
        self._request_all(Command.RESET)
        return self.observations

    def step_async(self, actions: np.ndarray, workers: range) -> None:
        """Start stepping the envs of `workers` (a contiguous range) with `actions` (one per env of
        those workers) and return at once: the caller works while they step. `step_wait` ends it."""
        self._check_open()
        envs = self._envs_of(workers)
        np.copyto(self._actions[envs], actions, casting="same_kind")
        for w in workers:
            self._send(self._workers[w], Command.STEP)

    def step_wait(self, workers: range) -> StepBatch:
        """Wait for the step started by `step_async(…, workers)`; the batch covers their envs only
        (its arrays are views valid until those envs step again; env indices are global)."""
        return self._step_batch(workers, self._gather(workers, self.timeout_s))

    def drain(self) -> None:
        """Read and drop the replies of requests still in flight (after a failure elsewhere), so
        every worker is ready for a new command. Failures found here surface on the next request."""
        in_flight = [i for i, w in enumerate(self._workers) if w.awaiting]
        if in_flight:
            try:
                self._gather(in_flight, self.timeout_s)
            except PoolError:
                pass

    def get_state(self) -> list[dict[str, Any]]:
        return [state for states in self._request_all(Command.GET_STATE) for state in states]

    def set_state(self, states: list[dict[str, Any]]) -> None:
        if len(states) != self.n_envs:
            raise ValueError(f"got {len(states)} env states for {self.n_envs} envs")
        for w in self._workers:
            self._send(w, Command.SET_STATE, [states[i] for i in w.envs])
        self._gather(range(self.n_workers), self.timeout_s)

    def restart_worker(self, index: int, seed_offset: int) -> None:
        """Replace worker `index` with a fresh process whose games have new derived seeds."""
        self._workers[index].awaiting = False
        self.drain()
        self._stop([self._workers[index]], timeout_s=2.0)
        for i in self._workers[index].envs:
            self.specs[i] = replace(self.specs[i], seed=self.specs[i].seed + seed_offset)
        self._workers[index] = self._spawn(self._workers[index].envs)
        self._await_start(index, self.timeout_s)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop(self._workers, timeout_s=5.0)
        # Detach every view before unmapping: touching unmapped shared memory is a segfault.
        self.observations = self.observations.copy()
        self._batch = StepBatch(self._batch.rewards.copy(), self._batch.terminals.copy(), self._batch.truncations.copy())
        self._actions = np.zeros_like(self._actions)
        self._shared.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _spawn(self, envs: range) -> _Worker:
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=run_worker,
            args=(child, [self.specs[i] for i in envs], self._shared.name, self._layout, envs.start),
            name=f"game-worker-{envs.start // self.envs_per_worker}",
            daemon=True,  # multiprocessing terminates daemons at interpreter exit: a last safety net
        )
        with _main_module_hidden():
            process.start()
        child.close()  # only the worker holds its end now, so its death shows as EOF here
        return _Worker(process, parent, envs)

    def _send(self, worker: _Worker, command: Command, payload: Any = None) -> None:
        worker.awaiting = command is not Command.CLOSE
        try:
            worker.conn.send_bytes(encode_command(command, payload))
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # a dead worker is reported by _gather, with its exit code

    def _request_all(self, command: Command) -> list[Any]:
        self._check_open()
        self.drain()
        for w in self._workers:
            self._send(w, command)
        return self._gather(range(self.n_workers), self.timeout_s)

    def _gather(self, indices: Sequence[int], timeout_s: float) -> list[Any]:
        """One reply from each worker in `indices`. Drains every live worker before raising, so
        the survivors stay in step; then raises the first failure, naming its worker.

        Waits with one `select.poll` over the Pipes and the process sentinels: it runs once per
        agent step, and `multiprocessing.connection.wait` (a new `selectors` object and a Python
        registration per handle on every call) cost more than half of the trainer's time here."""
        poller = select.poll()
        owners: dict[int, tuple[int, bool]] = {}  # fd -> (worker, is its sentinel)
        for i in indices:
            worker = self._workers[i]
            worker.awaiting = False  # answered, failed or abandoned: not in flight any more
            owners[worker.conn.fileno()] = (i, False)
            owners[worker.process.sentinel] = (i, True)
        for fd in owners:
            poller.register(fd, _READABLE)
        pending = set(indices)
        values: dict[int, Any] = {}
        failures: list[PoolError] = []

        def forget(fd: int) -> None:
            if owners.pop(fd, None) is not None:
                poller.unregister(fd)

        def settle(i: int, failure: PoolError | None = None) -> None:
            """Worker i is done for this request: stop watching it; record its failure."""
            pending.discard(i)
            forget(self._workers[i].conn.fileno())
            forget(self._workers[i].process.sentinel)
            if failure is not None:
                failures.append(failure)

        deadline = time.monotonic() + timeout_s
        while pending:
            ready = poller.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000)))
            if not ready:
                failures.extend(WorkerTimeout(i, timeout_s) for i in sorted(pending))
                break
            for fd, _ in ready:
                if fd not in owners:
                    continue  # its worker was settled earlier in this batch
                i, is_sentinel = owners[fd]
                worker = self._workers[i]
                if is_sentinel:  # the process has exited; a reply it sent first is still read
                    if worker.conn.poll():
                        forget(fd)
                    else:
                        worker.process.join(0.1)
                        settle(i, WorkerDied(i, worker.process.exitcode))
                    continue
                try:
                    reply = decode_reply(worker.conn.recv_bytes())
                except (EOFError, OSError):
                    worker.process.join(1.0)
                    settle(i, WorkerDied(i, worker.process.exitcode))
                    continue
                settle(i, WorkerError(i, reply.error) if reply.error is not None else None)
                if reply.error is None:
                    values[i] = reply.value
        if failures:
            raise failures[0]
        return [values[i] for i in indices]

    def _stop(self, workers: list[_Worker], timeout_s: float) -> None:
        for w in workers:
            if w.process.is_alive():
                self._send(w, Command.CLOSE)
        deadline = time.monotonic() + timeout_s
        for w in workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
        for w in workers:
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(1.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the pool is closed")
