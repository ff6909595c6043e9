"""Many games stepped together: the trainer's only view of the environment.

`EnvPool` holds everything a pool does whatever carries its commands, written once: splitting the
games into workers, the step's batch, waiting for workers to start (and starting again one that
died while starting), draining requests in flight after a failure, replacing a failed worker with
new seeds, the restart budget, and closing. A transport subclass says only how to start a worker,
send it a command, gather replies and stop it: `PipePool` (local processes), `RayPool` (Ray
actors), `SerialPool` (in this process, for fast tests and debugging).

Lifecycle rules, because a pool that hangs or leaks processes loses a day of training:
* every wait is bounded (`timeout_s`), and a transport notices a dead worker at once rather than
  by a hang (process sentinels, Ray's actor death);
* a failure is raised only after every other reply of the same request was read, so the survivors
  stay in step and take the next command;
* `close()` asks each worker to exit, waits with a deadline, and forces (then kills) only what is
  still alive after it; it is idempotent and safe after any error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from game.atari import EpisodeStats, GameSpec
from game.vector.group import GroupArrays, StepEvents
from game.vector.protocol import Command, PoolError, WorkerDied, WorkerKeepsFailing, WorkerTimeout

T = TypeVar("T")
RESEED_STRIDE = 1_000_003  # restart k shifts its worker's seeds by k × this prime: never a seed seen before


@dataclass
class StepBatch:
    """One step of some envs. The arrays are views of the pool's, valid until those envs step again."""

    rewards: np.ndarray  # (n,) float32, the learner's (clipped) reward
    terminals: np.ndarray  # (n,) bool, life lost or game over
    truncations: np.ndarray  # (n,) bool, time limit reached
    episodes: list[tuple[int, EpisodeStats]] = field(default_factory=list)  # (env index, finished game)
    final_observations: dict[int, np.ndarray] = field(default_factory=dict)  # env index -> truncated obs


@dataclass(frozen=True)
class RestartPolicy:
    """How often one worker may fail and be replaced: more than `max_restarts` times within the last
    `window` ticks (the trainer's updates) and the run stops, since something is wrong beyond chance."""

    max_restarts: int = 3
    window: int = 100


class EnvPool(ABC):
    """`specs[i]` builds env i; workers of `envs_per_worker` games; `observations[i]` is env i's
    current (frame_stack, 84, 84) uint8 observation."""

    def __init__(self, specs: Sequence[GameSpec], envs_per_worker: int = 1, timeout_s: float = 60.0,
                 start_timeout_s: float = 120.0, restarts: RestartPolicy | None = None) -> None:
        if not specs or len(specs) % envs_per_worker:
            raise ValueError(f"{len(specs)} envs do not split into workers of {envs_per_worker}")
        self.specs = list(specs)
        self.n_envs = len(specs)
        self.envs_per_worker = envs_per_worker
        self.n_workers = self.n_envs // envs_per_worker
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s  # starting (a new process, a Ray actor) is slower than a step
        self.restart_policy = restarts or RestartPolicy()
        self.restarts = 0  # workers replaced over the run; saved in checkpoints (it decides new seeds)
        self.on_restart: Callable[[str], None] = print  # where a replacement is reported
        self._failures: dict[int, deque[int]] = {}  # worker -> ticks at which it failed
        self._awaiting: set[int] = set()  # workers with a request whose reply is not read yet
        self._info: list[dict[str, Any]] = [{} for _ in range(self.n_workers)]
        self._closed = False
        arrays = self._allocate((specs[0].frame_stack, 84, 84))
        self.observations = arrays.observations
        self._actions = arrays.actions
        self._batch = StepBatch(arrays.rewards, arrays.terminals, arrays.truncations)
        try:
            for w in range(self.n_workers):
                self._start(w)
            for w in range(self.n_workers):
                self._await_start(w, start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.n_actions: int = self._info[0]["n_actions"]
        self.action_meanings: list[str] = self._info[0]["action_meanings"]

    # -- what a transport provides ----------------------------------------------------------------

    @abstractmethod
    def _allocate(self, observation_shape: tuple[int, ...]) -> GroupArrays:
        """The pool's arrays for all n_envs: observations, actions, rewards, terminals, truncations."""

    @abstractmethod
    def _start(self, worker: int) -> None:
        """Start `worker` on its games (`self.specs[self.envs_of(worker)]`); it answers INFO when ready."""

    @abstractmethod
    def _send(self, worker: int, command: Command, payload: Any = None) -> None:
        """Send a command without waiting; actions for STEP are already in `self._actions`."""

    @abstractmethod
    def _gather(self, workers: Sequence[int], timeout_s: float) -> dict[int, Any]:
        """One reply from each of `workers`: waits for all of them, then raises the first failure
        as a `PoolError` naming its worker. Observations land in `observations` on the way."""

    @abstractmethod
    def _stop(self, workers: Sequence[int], timeout_s: float) -> None:
        """Ask `workers` to exit; force those still there after `timeout_s`."""

    def _shutdown(self) -> None:  # noqa: B027 (optional: most transports hold nothing more)
        """Release what the transport holds besides its workers (shared memory, a private Ray)."""

    @abstractmethod
    def worker_pids(self) -> list[int]:
        """The process id of each worker (where it runs: a Ray actor may be on another node)."""

    def _start_failed(self, failure: PoolError) -> PoolError:
        """The error to raise when a worker cannot be started (a transport may explain it better)."""
        return failure

    # -- the interface --------------------------------------------------------------------------

    def envs_of(self, worker: int) -> slice:
        return slice(worker * self.envs_per_worker, (worker + 1) * self.envs_per_worker)

    def worker_info(self) -> list[dict[str, Any]]:
        return self._request_all(Command.INFO)

    def ping(self, workers: Sequence[int] | None = None) -> None:
        """One request that does no game work to each of `workers` (every worker by default) at
        once, and their answers: what the transport itself costs a step, with nothing stepped."""
        self._check_open()
        self.drain()
        workers = range(self.n_workers) if workers is None else workers
        for w in workers:
            self._request(w, Command.PING)
        self._replies(list(workers), self.timeout_s)

    def reset(self) -> np.ndarray:
        """Start a new game in every env; returns `observations`."""
        self._request_all(Command.RESET)
        return self.observations

    def step(self, actions: np.ndarray) -> StepBatch:
        """Apply one action per env; `observations` then holds the next observations."""
        every = range(self.n_workers)
        self.step_async(actions, every)
        return self.step_wait(every)

    def step_async(self, actions: np.ndarray, workers: range) -> None:
        """Start stepping the envs of `workers` (a contiguous range) with `actions` (one per env of
        those workers) and return at once: the caller works while they step. `step_wait` ends it."""
        self._check_open()
        envs = slice(workers.start * self.envs_per_worker, workers.stop * self.envs_per_worker)
        actions = np.asarray(actions)
        if actions.shape != (envs.stop - envs.start,):
            raise ValueError(f"expected {envs.stop - envs.start} actions for workers {workers.start}..{workers.stop - 1}, got shape {actions.shape}")
        if busy := [w for w in workers if w in self._awaiting]:
            raise RuntimeError(f"workers {busy} are already stepping: call step_wait first")
        np.copyto(self._actions[envs], actions, casting="same_kind")
        for w in workers:
            self._request(w, Command.STEP)

    def step_wait(self, workers: range) -> StepBatch:
        """Wait for the step started by `step_async(…, workers)`; the batch covers their envs only
        (env indices in its events are global)."""
        missing = [w for w in workers if w not in self._awaiting]
        if missing:
            raise RuntimeError(f"workers {missing} were not started: call step_async first")
        return self._step_batch(workers, self._replies(list(workers), self.timeout_s))

    def drain(self) -> None:
        """Read the replies of requests still in flight (after a failure elsewhere), so every worker
        takes a new command; their games did step. Failures found here surface on the next request."""
        if self._awaiting:
            try:
                self._replies(sorted(self._awaiting), self.timeout_s)
            except PoolError:
                pass

    def get_state(self) -> list[dict[str, Any]]:
        """Each env's full state (emulator included), for an exact resume."""
        return [state for states in self._request_all(Command.GET_STATE) for state in states]

    def set_state(self, states: list[dict[str, Any]]) -> None:
        if len(states) != self.n_envs:
            raise ValueError(f"got {len(states)} env states for {self.n_envs} envs")
        self._check_open()
        self.drain()
        for w in range(self.n_workers):
            self._request(w, Command.SET_STATE, states[self.envs_of(w)])
        self._replies(range(self.n_workers), self.timeout_s)

    def restart_worker(self, worker: int, seed_offset: int) -> None:
        """Replace `worker` (dead, hung or broken) with a fresh one whose games have seeds shifted by `seed_offset`."""
        self._check_open()
        self._awaiting.discard(worker)  # its reply, if any ever comes, is not waited for
        self.drain()
        self._stop([worker], timeout_s=2.0)
        for i in range(self.envs_of(worker).start, self.envs_of(worker).stop):
            self.specs[i] = replace(self.specs[i], seed=self.specs[i].seed + seed_offset)
        self._start(worker)
        self._await_start(worker, self.start_timeout_s)

    def with_restarts(self, call: Callable[[], T], tick: int) -> T:
        """`call()`, again and again after replacing each worker that failed in it, within the
        restart policy (`WorkerKeepsFailing` beyond it). `tick` is the caller's clock (its update):
        the policy's window is counted in it, and replacements are reported as happening in tick + 1."""
        while True:
            try:
                return call()
            except PoolError as failure:
                self._replace_failed(failure, tick)

    def close(self) -> None:
        """Stop every worker; idempotent; leaves no process behind."""
        if self._closed:
            return
        self._closed = True
        self._awaiting.clear()
        self._stop(range(self.n_workers), timeout_s=5.0)
        # Detach every view before the transport unmaps its memory: touching it then would crash.
        self.observations = self.observations.copy()
        self._batch = StepBatch(self._batch.rewards.copy(), self._batch.terminals.copy(), self._batch.truncations.copy())
        self._actions = np.zeros_like(self._actions)
        self._shutdown()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the shared plumbing ------------------------------------------------------------------------

    def _request(self, worker: int, command: Command, payload: Any = None) -> None:
        self._awaiting.add(worker)
        self._send(worker, command, payload)

    def _replies(self, workers: Sequence[int], timeout_s: float) -> dict[int, Any]:
        self._awaiting.difference_update(workers)  # answered, failed or abandoned: not in flight any more
        return self._gather(workers, timeout_s)

    def _request_all(self, command: Command) -> list[Any]:
        self._check_open()
        self.drain()
        for w in range(self.n_workers):
            self._request(w, command)
        replies = self._replies(range(self.n_workers), self.timeout_s)
        return [replies[w] for w in range(self.n_workers)]

    def _await_start(self, worker: int, timeout_s: float, attempts: int = 3) -> None:
        """Wait for `worker`'s first INFO; one that dies or hangs while starting (killed, out of
        memory, no room on a cluster) is started again, up to `attempts` times in all."""
        for attempt in range(attempts):
            try:
                self._info[worker] = self._gather([worker], timeout_s)[worker]
                return
            except (WorkerDied, WorkerTimeout) as failure:
                if attempt == attempts - 1:
                    raise self._start_failed(failure) from None
                self._stop([worker], timeout_s=1.0)
                self._start(worker)

    def _replace_failed(self, failure: PoolError, tick: int) -> None:
        history = self._failures.setdefault(failure.worker, deque())
        history.append(tick)
        while history and history[0] <= tick - self.restart_policy.window:
            history.popleft()
        if len(history) > self.restart_policy.max_restarts:
            raise WorkerKeepsFailing(
                f"worker {failure.worker} failed {len(history)} times within {self.restart_policy.window} updates "
                f"(limit {self.restart_policy.max_restarts}); last failure: {failure}") from failure
        self.restarts += 1
        # A new seed for the replacement: replaying the seed that just failed could fail again.
        self.restart_worker(failure.worker, seed_offset=self.restarts * RESEED_STRIDE)
        self.on_restart(f"{str(failure).splitlines()[0]}; replaced it (restart {self.restarts}){self.where(failure.worker)} "
                        f"during update {tick + 1}")

    def where(self, worker: int) -> str:
        """Where `worker` runs, for a person (`" on node-2"`); nothing where all run here."""
        return ""

    def _step_batch(self, workers: range, replies: Mapping[int, StepEvents | None]) -> StepBatch:
        envs = slice(workers.start * self.envs_per_worker, workers.stop * self.envs_per_worker)
        if envs == slice(0, self.n_envs):
            batch = self._batch
        else:
            batch = StepBatch(self._batch.rewards[envs], self._batch.terminals[envs], self._batch.truncations[envs])
        batch.episodes = []
        batch.final_observations = {}
        # In worker order, not in the order the replies arrived: games that end on the same step are
        # reported (games.csv, the score window) in the same order on every run and every transport.
        for worker in workers:
            if (events := replies.get(worker)) is not None:
                batch.episodes.extend(events.finished)
                batch.final_observations.update(events.final_observations)
        return batch

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the pool is closed")
