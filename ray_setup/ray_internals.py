"""Every private name of Ray this project reads or changes: the one place to re-check when Ray is
upgraded (setup.py admits every Ray from 2.60 on). Elsewhere Ray is used through its public API only;
tests/test_ray_seam.py fails on a private name of Ray read or changed anywhere else.

Upgrade checklist: for each name below, does the new Ray still have it, and does it still do what the
line beside it says? `internals_refusal()` checks that each is there when Ray is first used, so a Ray
that moved one is refused in one line at start-up, never half-working.

- `ray._raylet.GcsClient(address=…).internal_kv_get(key, namespace, timeout=…)`: a cluster's GCS asked
  once, with this driver's token, before `ray.init` (`gcs_answers`). Ray's public `ray.init` would
  retry a refused token 20 times, printing a warning each time, then raise.
- `ray._private.worker.print_to_stdstream`: how a driver prints what the cluster publishes (a raylet's
  death with 20 lines of its log), even with `log_to_driver=False`; replaced while a driver is
  connected and put back as it disconnects (`route_published_errors`). Ray has no public setting for
  those messages: `log_to_driver` covers the tasks' output, `RAY_BACKEND_LOG_LEVEL` the C++ side.
- `ray._private.worker.global_worker.node.get_logs_dir_path()`: the session's log folder on the
  driver's node (`driver_logs_dir`), where the driver's client lines go.
- `ray._private.worker._global_node.all_processes["monitor"]`: a private Ray's autoscaler monitor,
  ended before `ray.shutdown` (`end_autoscaler_monitor`): left to it, every stop waits a second.
- `ray._private.authentication.authentication_token_setup`: the logger whose notice, as a private Ray
  starts, advises `RAY_AUTH_MODE=disabled` (`TOKEN_NOTICE_LOGGER`).
- `ActorHandle._actor_id`: an actor's id before it has answered (`actor_id_of`).
- `ray._private.node.Node(ray._private.parameter.RayParams(…), head=, shutdown_at_exit=,
  spawn_reaper=)`, RayParams' `runtime_env_dir_name` and `dashboard_agent_listen_port`, `all_processes["raylet"][0].process`,
  `gcs_address`, `node_id` and `kill_all_processes(check_alive=, allow_graceful=)`: one node of
  tools/local_cluster.py, started in its own process (`start_node`), which `ray start` cannot do on
  loopback.

Ray's text read as data, in its own format (not names, so no refusal can check them; re-read them
on an upgrade too): the node-dead message the cluster publishes (`_NODE_DEAD` in
ray_setup/connection.py: "node id: … and address: …"), the head node's resource
`node:__internal_head__` (connection.py, to watch the head's raylet), and the line format of Ray's
C++ client on fd 2 (`_CLIENT_LOG_LINE` in ray_setup/driver_log.py). A change there degrades one
message (a lost node said in Ray's words, Ray's client lines on the terminal), never a run.

Public settings used instead of patches: `log_to_driver=False` and `logging_level` (ray.init);
`RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES` (Ray's own excludes list off, ours kept);
`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (ray_setup/loopback.py).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"

# (module, attribute path) of each name above: what `internals_refusal` looks for.
_NEEDED = (("ray._raylet", "GcsClient"), ("ray._private.worker", "print_to_stdstream"),
           ("ray._private.worker", "global_worker"), ("ray._private.worker", "_global_node"),
           ("ray._private.node", "Node.get_logs_dir_path"), ("ray._private.node", "Node.kill_all_processes"),
           ("ray._private.parameter", "RayParams"), ("ray.actor", "ActorHandle._actor_id"), (TOKEN_NOTICE_LOGGER, ""))
_RAY_PARAMS = ("runtime_env_dir_name", "dashboard_agent_listen_port")  # RayParams' parameters set by LocalNode


def internals_refusal() -> str | None:
    """One line naming what of the list above this Ray lacks; None when all is there. Imports Ray."""
    missing = []
    for module_name, path in _NEEDED:
        try:
            found: Any = importlib.import_module(module_name)
            for part in path.split(".") if path else ():
                found = getattr(found, part)
        except (ImportError, AttributeError):
            missing.append(f"{module_name}.{path}" if path else module_name)
    with contextlib.suppress(ImportError, AttributeError, TypeError, ValueError):  # no RayParams: named above
        parameters = inspect.signature(importlib.import_module("ray._private.parameter").RayParams).parameters
        missing += [f"RayParams({name}=…)" for name in _RAY_PARAMS if name not in parameters]
    if not missing:
        return None
    import ray

    return (f"Ray {ray.__version__}: expected a Ray with {', '.join(missing)} (ray_setup/ray_internals.py lists "
            "what this project uses of Ray's internals; Ray 2.60 has them all)")


def gcs_answers(host: str, port: int) -> None:
    """Asks the GCS at host:port one question with this driver's token; raises Ray's exception
    (`AuthenticationError` for a refused token) when it does not answer."""
    raylet: Any = importlib.import_module("ray._raylet")  # Ray's compiled client (no types to read)
    raylet.GcsClient(address=f"{host}:{port}").internal_kv_get(b"", None, timeout=30)


def route_published_errors(raylet_lines: Callable[[list[str]], None]) -> Callable[[], None]:
    """From now on the lines the cluster publishes as errors (a raylet's: `pid` "raylet") go to
    `raylet_lines` instead of this driver's stdout; a task's own output keeps Ray's handling. Ray
    looks the function up at each message. Returns what puts Ray's back."""
    from ray._private import worker

    original = worker.print_to_stdstream

    def to_ours(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            original(data, ignore_prefix)
        else:
            raylet_lines([str(line) for line in data.get("lines", [])])

    worker.print_to_stdstream = to_ours

    def put_back() -> None:
        worker.print_to_stdstream = original
    return put_back


def driver_logs_dir() -> Path:
    """The Ray session's log folder on this driver's node (once connected)."""
    from ray._private import worker

    return Path(worker.global_worker.node.get_logs_dir_path())


def end_autoscaler_monitor() -> None:
    """A private Ray's autoscaler monitor, ended by SIGKILL before `ray.shutdown`: a node of a fixed
    size has nothing for it to do or save. Left to `ray.shutdown`, every stop waited a second for it:
    Ray stops the GCS first, then sends the monitor a SIGTERM whose handler reports to that GCS (a
    call that waits up to 60 s), gives it Ray's one-second grace and kills it anyway. Ray's start has
    no switch for the monitor, so it is found in Ray's record of the processes it started."""
    node = getattr(sys.modules.get("ray._private.worker"), "_global_node", None)
    for info in getattr(node, "all_processes", {}).get("monitor", []):
        process = getattr(info, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def actor_id_of(handle: Any) -> str:
    """An actor's id, read from its handle (before the actor has said it itself)."""
    return str(handle._actor_id.hex())


class LocalNode:
    """One Ray node started in this process (tools/local_cluster.py): `options` are RayParams'.
    Ray is imported here, so its loopback switch must be set before."""

    def __init__(self, options: dict[str, Any], head: bool) -> None:
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        params = RayParams(**options)
        params.dashboard_agent_listen_port = None  # a free port, not Ray's fixed default that another Ray may hold
        self._node = Node(params, head=head, shutdown_at_exit=False, spawn_reaper=False)
        self.raylet = self._node.all_processes["raylet"][0].process  # a subprocess.Popen
        self.gcs_address: str = self._node.gcs_address
        self.node_id: str = self._node.node_id

    def stop(self, graceful: bool) -> None:
        self._node.kill_all_processes(check_alive=False, allow_graceful=graceful)
