"""`RayConnection`: a driver's one connection to Ray, as a context manager.

    with RayConnection(address, num_cpus=…) as connection:   # None: a private Ray, started here
        … ray.wait(refs, timeout=…) …; if connection.head_lost: …

It owns, in the order they are set up and undone in reverse:
- `ray.init` (a private Ray: ray_setup/private.py; a cluster: ray_setup/joining.py) and, on exit,
  `ray.shutdown` (a private Ray stops, a cluster is only left); the variables it sets for them (the
  tasks' environment; a job's own `excludes` in place of Ray's defaults) are put back;
- the driver's SIGTERM handler: `ray.init` replaces it with one that aborts the process (exit -6,
  nothing stopped); the driver's own is put back at once;
- on a cluster, the head's watch (ray_setup/head_watch.py): `head_lost` is a fact the driver reads
  between waits, never a signal;
- on a cluster, Ray's messages: what the cluster publishes as errors no longer reaches the driver's
  stdout (a node lost becomes one line of ours on stderr), and Ray's own advice, warnings and client
  lines go to one file of the session's logs, said once (ray_setup/driver_log.py); both are put back
  on exit.

Its exit runs whole: a Ctrl-C or SIGTERM that comes while Ray shuts down is held until Ray has
stopped and everything above is put back, then taken as it would have been (`HeldStops`).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from ray_setup.driver_log import DriverRayLog
from ray_setup.head_watch import HeadWatch
from ray_setup.installed import import_ray
from ray_setup.joining import cluster_refusal, prepare_to_join
from ray_setup.loopback import LOCAL_ONLY_VARIABLE
from ray_setup.nodes import name_of, node_names
from ray_setup.private import restore_environ, start_private_ray, stop_ray
from ray_setup.ray_internals import driver_logs_dir, internals_refusal, route_published_errors


def connection_refusal(address: str | None, option: str = "--ray-address") -> str | None:
    """Why a driver could not connect to the cluster at `address` (ray_setup/joining.py), or to a
    private Ray (`address` None: this Ray lacks what ray_setup/ray_internals.py uses), as one line;
    None if it can. Imports Ray, with the loopback switch set first for a private Ray. Before
    anything starts."""
    if address is not None:
        return cluster_refusal(address, option)
    if "ray" not in sys.modules:
        os.environ[LOCAL_ONLY_VARIABLE] = "0"
    return internals_refusal()


class HeldStops:
    """SIGINT and SIGTERM held while a connection ends, then handled once, after it, by the handlers
    that were in place (one ignored stays ignored): a stop that comes while Ray shuts down is taken
    once Ray has stopped and everything is put back, not in the middle of it. While `insistent`, a
    second stop is a person insisting: KeyboardInterrupt at once (it stands for both; none is
    delivered after). Main thread only (where Python runs its handlers); a handler set outside
    Python (None) is left alone."""

    def __init__(self) -> None:
        self.insistent = True
        self._held: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> HeldStops:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) not in (None, signal.SIG_IGN):
                    self._previous[signum] = signal.signal(signum, self._hold)
        return self

    def _hold(self, signum: int, frame: object) -> None:
        if self._held is not None and self.insistent:
            self._held = None
            raise KeyboardInterrupt(f"a second stop ({signal.Signals(signum).name}) while Ray shut down")
        self._held = self._held or signum

    def __exit__(self, exc_type: object, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._held is not None and exc_type is None:  # one raised meanwhile has said it all
            signal.raise_signal(self._held)


_OWN_EXCLUDES = "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES"  # Ray's public switch for its default excludes
_NODE_DEAD = re.compile(r"node id: ([0-9a-f]+) and address: (\S+?)(?: and|\s|$)")


class RayConnection:
    """A driver's connection to the Ray cluster at `address`, or to a private Ray of `num_cpus`
    logical CPUs started here (`address` None). `env`: variables every task gets (a private Ray's
    workers inherit the driver's environment, a cluster's get them through the runtime env);
    `runtime_env`: what else a cluster's tasks need (the code they run); `options` go to `ray.init`."""

    def __init__(self, address: str | None, num_cpus: int = 1, env: dict[str, str] | None = None,
                 runtime_env: dict[str, Any] | None = None, **options: Any) -> None:
        self.address, self.num_cpus = address, num_cpus
        self.env, self.runtime_env = dict(env or {}), dict(runtime_env or {})
        self.options = {"log_to_driver": False, "logging_level": logging.WARNING, **options}
        self.watch: HeadWatch | None = None
        self.ray: Any = None
        self._started = False  # ray.init was called (a failed start leaves processes to stop too)
        self._undo: list[Callable[[], None]] = []  # Ray's patches, fd 2, the environment: put back last to first
        self.nodes_lost: list[str] = []  # Ray's ids of the nodes the cluster said it lost, in order
        self.names: dict[str, str] = {}  # Ray's node id -> its name (ray_setup/nodes.py)

    def __enter__(self) -> RayConnection:
        own_sigterm = signal.getsignal(signal.SIGTERM)
        try:
            self._connect()
        except BaseException:  # a Ctrl-C while it starts, too: nothing is left connected
            self._put_back(own_sigterm)  # first: a stop held while it ends goes to the driver's handler, not Ray's
            self.__exit__()
            raise
        self._put_back(own_sigterm)
        return self

    @staticmethod
    def _put_back(own_sigterm: Any) -> None:
        if own_sigterm is not None:  # None: a handler not set from Python, nothing to put back
            signal.signal(signal.SIGTERM, own_sigterm)

    def _connect(self) -> None:
        if self.address is None:
            saved = {name: os.environ.get(name) for name in self.env}
            self._undo.append(lambda: restore_environ(saved))
            os.environ.update(self.env)
            self._started = True
            self.ray = start_private_ray(self.num_cpus, **self.options)
            return
        prepare_to_join(self.address)
        ray = import_ray()
        if (refusal := internals_refusal()) is not None:
            raise RuntimeError(refusal)
        runtime_env = {**self.runtime_env, "env_vars": {**self.runtime_env.get("env_vars", {}), **self.env}}
        if "excludes" in runtime_env:  # the job's own list is the one: Ray's defaults (warned of one by one) off, while connected
            saved = {_OWN_EXCLUDES: os.environ.get(_OWN_EXCLUDES)}
            self._undo.append(lambda: restore_environ(saved))
            os.environ.setdefault(_OWN_EXCLUDES, "")
        ray_log = DriverRayLog()
        ray_log.hold()
        self._undo.append(ray_log.stop)
        self._started = True
        ray.init(address=self.address, runtime_env=runtime_env, **self.options)
        self.ray = ray
        self._undo.append(route_published_errors(self._raylet_lines))
        raylet = [(n["NodeManagerAddress"], int(n["NodeManagerPort"])) for n in ray.nodes()
                  if n["Alive"] and "node:__internal_head__" in n["Resources"]][:1]
        self.watch = HeadWatch(self.address, raylet).start()
        self.names = node_names(ray)
        ray_log.start(driver_logs_dir() / f"driver-{os.getpid()}.log")

    def __exit__(self, *exc: object) -> None:
        self.ray = None
        with HeldStops() as stops:  # a Ctrl-C now would cut Ray's shutdown short and leave its patches in place
            try:
                if self.watch is not None:
                    self.watch.stop()
                if self._started:
                    self._started = False
                    stop_ray()  # before fd 2 is put back: what Ray's client says as it stops goes to its log too
            finally:
                stops.insistent = False  # what is put back is put back whole, however often a person asks
                while self._undo:
                    self._undo.pop()()

    @property
    def connected(self) -> bool:
        return self.ray is not None

    @property
    def head_lost(self) -> bool:
        """Whether the watch saw the cluster's head go (never, for a private Ray)."""
        return self.watch is not None and self.watch.lost.is_set()

    def lost_now(self) -> bool:
        """Whether the head is gone, looked at now: for a driver whose tasks ended with Ray's errors
        for a lost node, which can come before the watch's next look."""
        return self.watch is not None and self.watch.refuses_now()

    def fits(self, cpus: float) -> bool:
        """Whether some live node has `cpus` CPUs (a private Ray has room for whatever it was started for)."""
        return self.address is None or any(n["Alive"] and n["Resources"].get("CPU", 0) >= cpus for n in self.ray.nodes())

    def _raylet_lines(self, lines: list[str]) -> None:
        """What the cluster published as a raylet's error: one line of ours per node lost; nothing
        once the head is lost (the driver's own line says so)."""
        if self.head_lost:
            return
        for line in lines:
            if (match := _NODE_DEAD.search(line)) and match[1] not in self.nodes_lost:
                self.nodes_lost.append(match[1])
                print(f"ray: node {self.node_name(match[1])} was lost ({match[2]}, Ray's id {match[1][:12]}); what ran there "
                      "is replaced on the other nodes (Ray's account is in that node's Ray logs)", file=sys.stderr, flush=True)

    def node_name(self, node_id: str | None) -> str:
        """`node_id`'s name, the cluster asked again for a node it did not know (one added since)."""
        if node_id is not None and node_id not in self.names and self.ray is not None:
            self.names.update(node_names(self.ray))
        return name_of(self.names, node_id)
