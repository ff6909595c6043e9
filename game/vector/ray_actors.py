"""The Ray transport: each worker is a Ray actor holding a `GameGroup`, the trainer on the driver.

An actor answers one call per command with its group's reply plus, when the command moved the
games, its arrays (observations uint8 (k, stack, 84, 84), rewards, terminals, truncations). Ray
serialises numpy arrays out-of-band (pickle protocol 5 buffers), so a step's frames travel as raw
bytes, never pickled element by element; replies under Ray's inline limit (100 KiB, up to 3 games
per actor) travel in the RPC reply itself. The driver copies them into the pool's arrays, so the
trainer sees exactly what the local pool gives it: same specs, same games, observation for
observation.

Failures become the pool's errors naming the worker and the actor: an exception in an actor →
`WorkerError` with its traceback; an actor (or its node) gone → `WorkerDied`; no answer within
`timeout_s` → `WorkerTimeout`; on a cluster joined here, its head lost (the connection's watch,
ray_setup/head_watch.py) → `ClusterLost`, which no replacement can mend. `close()` kills every
actor and, if this pool connected to Ray itself, ends that connection (ray_setup/connection.py): a
private Ray it started stops (gcs, raylet, agents, workers), a cluster is only left. A Ray this
pool starts is private: on loopback, with a token of its own (ray_setup/private.py).

Ray is optional: imported only when a pool is built, so `import game` works without it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from game.atari import GameSpec
from game.vector.group import GameGroup, GroupArrays
from game.vector.pool import EnvPool, RestartPolicy
from game.vector.protocol import ClusterLost, Command, PoolError, RemoteError, WorkerDied, WorkerError, WorkerTimeout
from ray_setup.connection import RayConnection
from ray_setup.errors import first_line, plain
from ray_setup.installed import import_ray, ray_connected
from ray_setup.nodes import name_of, node_names
from ray_setup.ray_internals import actor_id_of

__all__ = ["EnvActor", "RayPool"]

_MOVES_GAMES = (Command.STEP, Command.RESET, Command.SET_STATE, Command.INFO)  # replies carry the arrays


class EnvActor:
    """The body of one Ray actor (made remote by `RayPool`). A plain class, so it can be read and
    tested without Ray; a synchronous actor runs one call at a time, so nothing needs a lock."""

    def __init__(self, specs: list[GameSpec], first_env: int) -> None:
        self.group = GameGroup(specs, first_env, GroupArrays.allocate(len(specs), (specs[0].frame_stack, 84, 84)))

    def handle(self, command: Command, payload: Any = None) -> tuple[Any, GroupArrays | None]:
        # The arrays are returned as they are: Ray serialises a return value before this actor runs
        # its next call, so reusing the buffers next step is safe.
        if command is Command.STEP:
            self.group.arrays.actions[:] = payload
        value = self.group.handle(command, payload if command is not Command.STEP else None)
        if command is Command.INFO:
            import ray  # only ever called inside an actor, where Ray is present

            context = ray.get_runtime_context()
            value = {**value, "node": ray.util.get_node_ip_address(), "node_id": context.get_node_id(),
                     "actor_id": context.get_actor_id()}
        return value, (self.group.arrays if command in _MOVES_GAMES else None)


class RayPool(EnvPool):
    """`n_envs / envs_per_worker` Ray actors.

    * `address`: a running cluster to join (`auto`, `HOST:PORT`, `ray://HOST:PORT`). None: use the
      Ray this process is already connected to (a sweep trial, a test), or else start a private
      local instance that lives as long as the pool.
    * `cpus_per_worker`: CPUs Ray reserves per actor (an actor runs one thread). A private local
      instance declares at least `n_workers × cpus_per_worker` CPUs, so all actors start even on a
      2-core machine, sharing the cores as the local pool's processes do; on a real cluster the
      reservations are real and Ray spreads the actors over nodes with free CPUs.
    * `nodes`: Ray node ids to pin the actors to, actor w on `nodes[w % len(nodes)]` (Ray's hard
      node affinity), to measure what one placement costs (tools/node_crossing.py); a replacement
      goes to the same node. Empty: wherever Ray finds the CPUs.
    """

    def __init__(self, specs: Sequence[GameSpec], envs_per_worker: int = 1, timeout_s: float = 60.0,
                 start_timeout_s: float = 120.0, restarts: RestartPolicy | None = None,
                 address: str | None = None, cpus_per_worker: float = 1.0, nodes: Sequence[str] = ()) -> None:
        if not cpus_per_worker > 0:
            raise ValueError(f"cpus_per_worker must be > 0, got {cpus_per_worker}")
        self.cpus_per_worker = cpus_per_worker
        self.placement = list(nodes)
        self._connection: RayConnection | None = None  # a connection this pool made (none inside a sweep's trial)
        self._actors: dict[int, Any] = {}
        self._pending: dict[int, Any] = {}  # worker -> ObjectRef of its call in flight
        self._nodes: dict[str, None] = {}  # node id -> None: the nodes used, in order
        self._names: dict[str, str] = {}  # node id -> its name (ray_setup/nodes.py), as the cluster gave it
        self._lost = False  # its head was lost: the actors went with it
        if not ray_connected():
            self._connect(address, len(specs) // envs_per_worker)
        self._ray = import_ray()
        self._remote = self._ray.remote(EnvActor)
        try:
            super().__init__(specs, envs_per_worker, timeout_s, start_timeout_s, restarts)
        except BaseException:
            self._shutdown()  # the base closed the actors; a Ray started here goes too
            raise

    def _connect(self, address: str | None, n_workers: int) -> None:
        if address is None:
            # A private instance on this machine (loopback only, its own token): enough logical
            # CPUs for every actor.
            connection = RayConnection(None, max(os.cpu_count() or 1, math.ceil(n_workers * self.cpus_per_worker)),
                                       configure_logging=True)
        else:
            # Nodes of a cluster need the same Python environment (ale-py, gymnasium, opencv) but
            # not this checkout: the packages an actor imports travel with the job, so the actors
            # run the driver's code whatever version a node has installed.
            packages = [str(Path(__file__).resolve().parents[2] / name) for name in ("game", "ray_setup")]
            connection = RayConnection(address, runtime_env={"py_modules": packages}, configure_logging=True)
        self._connection = connection.__enter__()  # left in `_shutdown`, however the pool ends

    def _await_start(self, worker: int, timeout_s: float, attempts: int = 3) -> None:
        super()._await_start(worker, timeout_s, attempts)
        if (node := self._info[worker].get("node_id")) is not None:
            self._nodes.setdefault(node)
            if node not in self._names:  # a node not seen before (a replacement's): ask the cluster its name
                self._names.update(node_names(self._ray))

    def nodes_used(self) -> list[str]:
        """The Ray node id of every node an actor of this pool ran on, replaced ones' included, in
        the order first used (nodes on one machine share its address: the id tells them apart)."""
        return list(self._nodes)

    def node_names_used(self) -> list[str]:
        """The names of `nodes_used`, in the same order (ray_setup/nodes.py)."""
        return [self.node_name(node) for node in self._nodes]

    def node_name(self, node_id: str | None) -> str:
        return name_of(self._names, node_id)

    def placed_on(self) -> str:
        """Where the actors run now, as a person reads it: `2 nodes: node-1 (2 actors), node-2 (2 actors)`."""
        counts: dict[str, int] = {}
        for w in range(self.n_workers):
            name = self.node_name(self._info[w].get("node_id"))
            counts[name] = counts.get(name, 0) + 1
        listed = ", ".join(f"{name} ({n} actor{'s' if n > 1 else ''})" for name, n in counts.items())
        return f"{len(counts)} node{'s' if len(counts) > 1 else ''}: {listed}"

    def where(self, worker: int) -> str:
        return f" on {self.node_name(self._info[worker].get('node_id'))}"

    def worker_pids(self) -> list[int]:
        return [self._info[w]["pid"] for w in range(self.n_workers)]

    def _allocate(self, observation_shape: tuple[int, ...]) -> GroupArrays:
        return GroupArrays.allocate(len(self.specs), observation_shape)

    def _start(self, worker: int) -> None:
        # Ray registers a new actor with the head before `.remote()` returns: with the head gone,
        # that call would wait until Ray's client gives up and ends the process a minute later.
        self._raise_if_lost(check_now=True)
        envs = self.envs_of(worker)
        # No Ray-side restarts or retries: a dead actor is the pool's to replace (new seeds, rollout
        # redone), exactly like a dead worker process.
        options: dict[str, Any] = {"num_cpus": self.cpus_per_worker, "max_restarts": 0, "max_task_retries": 0}
        if self.placement:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.placement[worker % len(self.placement)], soft=False)
        self._actors[worker] = self._remote.options(**options).remote(self.specs[envs], envs.start)
        self._pending[worker] = self._actors[worker].handle.remote(Command.INFO)

    def _send(self, worker: int, command: Command, payload: Any = None) -> None:
        if command is Command.STEP:
            # Arguments are serialised at submission, so the pool may reuse its actions at once.
            payload = self._actions[self.envs_of(worker)].astype("int64", copy=False)
        self._pending[worker] = self._actors[worker].handle.remote(command, payload)

    def _gather(self, workers: Sequence[int], timeout_s: float) -> dict[int, Any]:
        """Waits for every call (so none stays in flight), stores each good reply's arrays, then
        raises the first failure, if any."""
        ray = self._ray
        refs = {w: self._pending.pop(w) for w in workers if w in self._pending}
        ready_set = self._wait(list(refs.values()), timeout_s)
        values: dict[int, Any] = {}
        failures: list[PoolError] = []
        for w, ref in refs.items():
            if ref not in ready_set:
                failures.append(WorkerTimeout(w, timeout_s))
                continue
            try:
                value, arrays = ray.get(ref)
            except Exception as e:  # classified below; anything not from Ray is re-raised there
                failures.append(self._pool_error(w, e))
                continue
            if arrays is not None:
                envs = self.envs_of(w)
                self.observations[envs] = arrays.observations
                self._batch.rewards[envs] = arrays.rewards
                self._batch.terminals[envs] = arrays.terminals
                self._batch.truncations[envs] = arrays.truncations
            values[w] = value
        if failures:
            raise failures[0]
        return values

    def _wait(self, refs: list[Any], timeout_s: float) -> set[Any]:
        """The refs of `refs` ready within `timeout_s`. On a cluster joined here, waited for in slices
        of half a second, so that a lost head ends the wait at once (`ClusterLost`)."""
        if self._connection is None or self._connection.watch is None:
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout_s, fetch_local=True)
            return set(ready)
        deadline, ready_set = time.monotonic() + timeout_s, set()
        while refs:
            self._raise_if_lost()
            ready, refs = self._ray.wait(refs, num_returns=len(refs), timeout=max(0.0, min(0.5, deadline - time.monotonic())),
                                         fetch_local=True)
            ready_set.update(ready)
            if time.monotonic() >= deadline:
                break
        return ready_set

    def _raise_if_lost(self, check_now: bool = False) -> None:
        connection = self._connection
        if connection is not None and connection.address is not None and (
                connection.head_lost or (check_now and connection.lost_now())):
            self._lost = True
            raise ClusterLost(connection.address)

    def _stop(self, workers: Sequence[int], timeout_s: float) -> None:
        for w in workers:
            self._pending.pop(w, None)
            if (actor := self._actors.pop(w, None)) is not None and not self._lost:  # a lost cluster's actors are gone
                try:
                    self._ray.kill(actor, no_restart=True)
                except Exception:
                    pass  # already gone (or Ray itself is): nothing left to stop

    def _shutdown(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.__exit__()  # a private Ray's processes stopped and waited for; a cluster's nodes stay up

    def _start_failed(self, failure: PoolError) -> PoolError:
        """A start timeout often means the cluster has too few CPUs for the actors: say so."""
        if not isinstance(failure, WorkerTimeout):
            return failure
        have = self._ray.cluster_resources().get("CPU", 0.0)
        need = self.n_workers * self.cpus_per_worker
        if have >= need:
            return failure
        return WorkerTimeout(failure.worker, failure.timeout_s, f"the pool asks Ray for {self.n_workers} actors × "
                             f"{self.cpus_per_worker:g} CPUs = {need:g} CPUs and the cluster has {have:g}; add nodes or lower "
                             "--ray-cpus-per-worker")

    def _pool_error(self, worker: int, e: Exception) -> PoolError:
        """Ray's exception for a call to actor `worker`, as the pool's error for that worker."""
        from ray import exceptions as rx

        actor = self._describe(worker)
        if isinstance(e, rx.RayTaskError):
            cause = e.cause if isinstance(e.cause, BaseException) else None
            type_name = type(cause).__name__ if cause is not None else "RayTaskError"
            message = str(cause) if cause is not None else first_line(e)
            # str(e) is Ray's header (function, pid, ip, actor id) and the actor's traceback, coloured.
            return WorkerError(worker, RemoteError(type_name, message, f"on {actor}\n{plain(str(e))}"))
        if isinstance(e, rx.GetTimeoutError):
            return WorkerTimeout(worker, self.timeout_s)
        if isinstance(e, rx.RayError):  # the actor, its worker process or its node is gone
            self._raise_if_lost(check_now=True)  # with the head: not a worker to replace
            return WorkerDied(worker, None, f"worker {worker} ({actor}) died without answering: {first_line(e)}")
        raise e

    def _describe(self, worker: int) -> str:
        info = self._info[worker]
        actor = self._actors.get(worker)
        actor_id = info.get("actor_id") or (actor_id_of(actor) if actor is not None else "?")
        where = f", pid {info['pid']} on {self.node_name(info.get('node_id'))}" if "pid" in info else ""
        return f"Ray actor {actor_id}{where}"
