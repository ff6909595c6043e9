"""Env workers as Ray actors: the `EnvPool` interface over a Ray cluster, the trainer on the driver.

Each actor holds `envs_per_worker` `Game`s (the same class the local workers run) and answers one
call per step with one object: a tuple of numpy arrays (observations uint8 (k, stack, 84, 84),
rewards float32, terminals and truncations bool) plus the rare events (finished games, truncated
final observations), usually `None`. Ray serialises numpy arrays out-of-band (pickle protocol 5
buffers), so a step's frames are copied into the object store as raw bytes, never pickled element
by element; results under Ray's inline limit (100 KiB, i.e. up to 3 games per actor) travel in the
RPC reply itself. The driver copies them into its own `observations` array, so the trainer sees
exactly what `PipePool` gives it.

Same semantics as `PipePool`:
* same `GameSpec`s → the same games, observation for observation (seeding is in the spec);
* a failure is raised as the protocol's `PoolError`s, naming the worker index and the Ray actor:
  an exception inside an actor → `WorkerError` with its traceback; an actor (or its node) gone →
  `WorkerDied`; no answer within `timeout_s` → `WorkerTimeout`. `restart_worker` kills the actor and
  starts a new one with shifted seeds, which the trainer counts as a worker restart;
* `close()` kills every actor; if this pool started or connected Ray itself, it also calls
  `ray.shutdown()`, which stops the local Ray processes it started (gcs, raylet, agents, workers).

Ray is optional: it is imported only when a pool is built, so `import game` works without it.
Nothing here imports torch (the actors run this module).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from game.atari import FRAME_SIZE, EpisodeStats, Game, GameSpec
from game.pool import EnvPool, StepBatch
from game.protocol import PoolError, RemoteError, WorkerDied, WorkerError, WorkerTimeout

__all__ = ["INSTALL_HINT", "EnvActor", "RayPool", "import_ray", "ray_installed"]

INSTALL_HINT = 'pip install -e ".[ray]"'
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# One step's reply: observations, rewards, terminals, truncations, and the rare events
# ([(global env index, EpisodeStats)], {global env index: final observation}) or None.
StepReply = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "tuple[list[tuple[int, EpisodeStats]], dict[int, np.ndarray]] | None"]


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def import_ray() -> Any:
    """The `ray` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"the ray backend needs Ray, an optional extra: {INSTALL_HINT}") from e
    return ray


class EnvActor:
    """The body of one Ray actor (made remote by `RayPool`): a few games stepped together.

    A plain class so it can be tested and read without Ray; its methods are called in order,
    one at a time (a synchronous actor), so no locking is needed.
    """

    def __init__(self, specs: list[GameSpec], first_env: int) -> None:
        self.first_env = first_env
        k = len(specs)
        self.observations = np.zeros((k, specs[0].frame_stack, FRAME_SIZE, FRAME_SIZE), np.uint8)
        self.rewards = np.zeros(k, np.float32)
        self.terminals = np.zeros(k, bool)
        self.truncations = np.zeros(k, bool)
        self.games = [Game(spec, self.observations[i]) for i, spec in enumerate(specs)]

    def info(self) -> dict[str, Any]:
        import ray  # only ever called inside an actor, where Ray is present

        return {
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "actor_id": ray.get_runtime_context().get_actor_id(),
            "n_actions": self.games[0].n_actions,
            "action_meanings": self.games[0].action_meanings,
            "torch_imported": "torch" in sys.modules,
            "observations": self.observations,
        }

    def reset(self) -> np.ndarray:
        for game in self.games:
            game.reset()
        return self.observations

    def step(self, actions: np.ndarray) -> StepReply:
        # The arrays are returned as they are: Ray serialises a return value before this actor runs
        # its next call, so reusing the buffers next step is safe.
        events = None
        for i, game in enumerate(self.games):
            result = game.step(int(actions[i]))
            self.rewards[i] = result.reward
            self.terminals[i] = result.terminal
            self.truncations[i] = result.truncated
            if result.episode is not None:
                if events is None:
                    events = ([], {})
                events[0].append((self.first_env + i, result.episode))
                if result.final_observation is not None:
                    events[1][self.first_env + i] = result.final_observation
        return self.observations, self.rewards, self.terminals, self.truncations, events

    def get_state(self) -> list[dict[str, Any]]:
        return [game.get_state() for game in self.games]

    def set_state(self, states: list[dict[str, Any]]) -> np.ndarray:
        for game, state in zip(self.games, states, strict=True):
            game.set_state(state)
        return self.observations


class RayPool(EnvPool):
    """`specs[i]` builds env i; `envs_per_worker` games per Ray actor; `n_envs / envs_per_worker` actors.

    * `address`: a running cluster to join (`auto`, `HOST:PORT`, `ray://HOST:PORT`). None: use the
      Ray this process is already connected to (a sweep trial, a test), or else start a private
      local instance that lives as long as the pool.
    * `cpus_per_worker`: CPUs Ray reserves per actor (an actor runs one thread). A private local
      instance declares at least `n_workers × cpus_per_worker` CPUs, so all actors start even on a
      2-core machine, sharing the cores as the local pool's processes do; on a real cluster the
      reservations are real and Ray spreads the actors over nodes with free CPUs.
    """

    def __init__(
        self,
        specs: Sequence[GameSpec],
        envs_per_worker: int = 1,
        timeout_s: float = 60.0,
        start_timeout_s: float = 120.0,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
    ) -> None:
        self._take_specs(specs, envs_per_worker, timeout_s)
        if not cpus_per_worker > 0:
            raise ValueError(f"cpus_per_worker must be > 0, got {cpus_per_worker}")
        ray = self._ray = import_ray()
        self.cpus_per_worker = cpus_per_worker
        self._closed = False
        self._owns_ray = False
        self._actors: list[Any] = []
        self._info: list[dict[str, Any]] = []
        self._pending: dict[int, Any] = {}  # worker index -> ObjectRef of its step in flight
        n_workers = self.n_envs // envs_per_worker
        stack = specs[0].frame_stack
        self.observations = np.zeros((self.n_envs, stack, FRAME_SIZE, FRAME_SIZE), np.uint8)
        self._batch = StepBatch(np.zeros(self.n_envs, np.float32), np.zeros(self.n_envs, bool), np.zeros(self.n_envs, bool))
        try:
            if not ray.is_initialized():
                self._connect(address, n_workers)
            self._remote = ray.remote(EnvActor)
            self._actors = [self._new_actor(w) for w in range(n_workers)]
            self._info = [{} for _ in range(n_workers)]
            self._await_start(range(n_workers), start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.n_actions = self._info[0]["n_actions"]
        self.action_meanings = self._info[0]["action_meanings"]

    def _connect(self, address: str | None, n_workers: int) -> None:
        ray = self._ray
        common = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
                  "configure_logging": True}
        if address is None:
            # A private instance on this machine: enough logical CPUs for every actor.
            cpus = max(os.cpu_count() or 1, math.ceil(n_workers * self.cpus_per_worker))
            ray.init(num_cpus=cpus, **common)
        else:
            # Nodes of a cluster need the same Python environment (ale-py, gymnasium, opencv) but
            # not this checkout: the `game` package travels with the job, so the actors run the
            # driver's code whatever version a node has installed.
            package = str(Path(__file__).resolve().parent)
            ray.init(address=address, runtime_env={"py_modules": [package]}, **common)
        self._owns_ray = True

    # -- the EnvPool interface ----------------------------------------------------------------

    @property
    def n_workers(self) -> int:
        return len(self._actors)

    def worker_pids(self) -> list[int]:
        return [info["pid"] for info in self._info]

    def worker_info(self) -> list[dict[str, Any]]:
        self._check_open()
        self.drain()
        infos = self._gather({w: a.info.remote() for w, a in enumerate(self._actors)}, self.timeout_s)
        return [{k: v for k, v in infos[w].items() if k != "observations"} for w in range(self.n_workers)]

    def reset(self) -> np.ndarray:
        self._check_open()
        self.drain()
        observations = self._gather({w: a.reset.remote() for w, a in enumerate(self._actors)}, self.timeout_s)
        for w, obs in observations.items():
            self.observations[self._envs(w)] = obs
        return self.observations

    def step_async(self, actions: np.ndarray, workers: range) -> None:
        """Send each actor of `workers` its envs' actions and return at once."""
        self._check_open()
        k = self.envs_per_worker
        actions = np.asarray(actions)
        if actions.shape != (len(workers) * k,):
            raise ValueError(f"expected {len(workers) * k} actions for workers {workers.start}..{workers.stop - 1}, got shape {actions.shape}")
        for w in workers:
            if w in self._pending:
                raise RuntimeError(f"worker {w} is already stepping: call step_wait first")
            local = actions[(w - workers.start) * k:(w - workers.start + 1) * k]
            # Arguments are serialised at submission, so the caller may reuse `actions` at once.
            self._pending[w] = self._actors[w].step.remote(local.astype(np.int64, copy=False))

    def step_wait(self, workers: range) -> StepBatch:
        missing = [w for w in workers if w not in self._pending]
        if missing:
            raise RuntimeError(f"workers {missing} were not started: call step_async first")
        replies = self._gather({w: self._pending.pop(w) for w in workers}, self.timeout_s, on_value=self._store_step)
        return self._step_batch(workers, (replies[w][4] for w in workers))

    def drain(self) -> None:
        """Wait for steps still in flight (after a failure elsewhere); the survivors' results are
        kept (their games did step), failures are dropped and surface on the next request."""
        if self._pending:
            pending, self._pending = self._pending, {}
            try:
                self._gather(pending, self.timeout_s, on_value=self._store_step)
            except PoolError:
                pass

    def get_state(self) -> list[dict[str, Any]]:
        self._check_open()
        self.drain()
        states = self._gather({w: a.get_state.remote() for w, a in enumerate(self._actors)}, self.timeout_s)
        return [state for w in range(self.n_workers) for state in states[w]]

    def set_state(self, states: list[dict[str, Any]]) -> None:
        if len(states) != self.n_envs:
            raise ValueError(f"got {len(states)} env states for {self.n_envs} envs")
        self._check_open()
        self.drain()
        refs = {w: a.set_state.remote(states[self._envs(w)]) for w, a in enumerate(self._actors)}
        for w, obs in self._gather(refs, self.timeout_s).items():
            self.observations[self._envs(w)] = obs

    def restart_worker(self, index: int, seed_offset: int) -> None:
        """Kill actor `index` (dead, hung or broken) and start a new one whose games have new seeds."""
        self._check_open()
        self._pending.pop(index, None)
        self.drain()
        self._kill(index)
        for i in range(*self._envs(index).indices(self.n_envs)):
            self.specs[i] = replace(self.specs[i], seed=self.specs[i].seed + seed_offset)
        self._actors[index] = self._new_actor(index)
        self._await_start(range(index, index + 1), self.timeout_s)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending = {}
        for w in range(len(self._actors)):
            self._kill(w)
        if self._owns_ray:
            self._owns_ray = False
            # Stops what ray.init started here (gcs, raylet, agents, worker processes) and waits
            # for them; on a cluster it only disconnects, the cluster's nodes stay up.
            self._ray.shutdown()

    # -- plumbing -------------------------------------------------------------------------------

    def _envs(self, worker: int) -> slice:
        return slice(worker * self.envs_per_worker, (worker + 1) * self.envs_per_worker)

    def _new_actor(self, worker: int) -> Any:
        envs = self._envs(worker)
        # No Ray-side restarts or retries: a dead actor is the trainer's to replace (new seeds,
        # rollout redone), exactly like a dead worker process.
        return self._remote.options(num_cpus=self.cpus_per_worker, max_restarts=0, max_task_retries=0).remote(
            self.specs[envs], envs.start)

    def _kill(self, worker: int) -> None:
        try:
            self._ray.kill(self._actors[worker], no_restart=True)
        except Exception:
            pass  # already gone (or Ray itself is): nothing left to stop

    def _await_start(self, workers: range, timeout_s: float, attempts: int = 3) -> None:
        """Wait until each actor of `workers` has built its games; one that dies while starting is
        started again, up to `attempts` times. Its first observations go into `observations`."""
        todo = list(workers)
        for attempt in range(attempts):
            try:
                infos = self._gather({w: self._actors[w].info.remote() for w in todo}, timeout_s)
            except (WorkerDied, WorkerTimeout) as failure:
                if attempt == attempts - 1:
                    raise (self._unplaced(failure) if isinstance(failure, WorkerTimeout) else failure) from None
                self._kill(failure.worker)
                self._actors[failure.worker] = self._new_actor(failure.worker)
                continue
            for w, info in infos.items():
                self.observations[self._envs(w)] = info.pop("observations")
                self._info[w] = info
            return

    def _unplaced(self, failure: WorkerTimeout) -> PoolError:
        """A start timeout often means the cluster has too few CPUs for the actors: say so."""
        have = self._ray.cluster_resources().get("CPU", 0.0)
        need = self.n_workers * self.cpus_per_worker
        if have >= need:
            return failure
        error = WorkerTimeout(failure.worker, failure.timeout_s)
        error.args = (f"{failure}: the pool asks Ray for {self.n_workers} actors × {self.cpus_per_worker:g} CPUs = "
                      f"{need:g} CPUs and the cluster has {have:g}; add nodes or lower --ray-cpus-per-worker",)
        return error

    def _store_step(self, worker: int, reply: StepReply) -> None:
        envs = self._envs(worker)
        self.observations[envs] = reply[0]
        self._batch.rewards[envs] = reply[1]
        self._batch.terminals[envs] = reply[2]
        self._batch.truncations[envs] = reply[3]

    def _gather(self, pending: dict[int, Any], timeout_s: float, on_value: Any = None) -> dict[int, Any]:
        """The value of each worker's ObjectRef in `pending`. Waits for all of them (so none stays
        in flight), hands each good value to `on_value`, then raises the first failure, if any."""
        ray = self._ray
        refs = list(pending.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s, fetch_local=True)
        ready_set = set(ready)
        values: dict[int, Any] = {}
        failures: list[PoolError] = []
        for w, ref in pending.items():
            if ref not in ready_set:
                failures.append(WorkerTimeout(w, timeout_s))
                continue
            try:
                values[w] = ray.get(ref)
            except Exception as e:  # classified below; anything not from Ray is re-raised there
                failures.append(self._pool_error(w, e))
                continue
            if on_value is not None:
                on_value(w, values[w])
        if failures:
            raise failures[0]
        return values

    def _pool_error(self, worker: int, e: Exception) -> PoolError:
        """Ray's exception for a call to actor `worker`, as the protocol's error for that worker."""
        from ray import exceptions as rx

        actor = self._describe(worker)
        if isinstance(e, rx.RayTaskError):
            cause = e.cause if isinstance(e.cause, BaseException) else None
            type_name = type(cause).__name__ if cause is not None else "RayTaskError"
            message = str(cause) if cause is not None else str(e).splitlines()[0]
            # str(e) is Ray's header (function, pid, ip, actor id) and the actor's traceback, coloured.
            text = _ANSI.sub("", str(e))
            return WorkerError(worker, RemoteError(type_name, message, f"on {actor}\n{text}"))
        if isinstance(e, rx.GetTimeoutError):
            return WorkerTimeout(worker, self.timeout_s)
        if isinstance(e, rx.RayError):  # the actor, its worker process or its node is gone
            died = WorkerDied(worker, None)
            reason = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
            died.args = (f"worker {worker} ({actor}) died without answering: {reason}",)
            return died
        raise e

    def _describe(self, worker: int) -> str:
        info = self._info[worker] if worker < len(self._info) else {}
        actor_id = info.get("actor_id") or self._actors[worker]._actor_id.hex()
        where = f", pid {info['pid']} on {info['node']}" if "pid" in info else ""
        return f"Ray actor {actor_id}{where}"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the pool is closed")
