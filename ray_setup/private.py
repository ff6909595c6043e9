"""Starting Ray for this user alone, and stopping it: the private Ray of `--backend ray` without an
address, of a local sweep or population, and of the tests.

* Every port on loopback (ray_setup/loopback.py): the switch is set before the first `import ray`,
  and the address Ray will use is checked before anything starts.
* Token authentication on, with a token of its own (ray_setup/token_folder.py), named to Ray by
  `RAY_AUTH_TOKEN_PATH`: a token that leaked from another file does not open this instance. A token
  or mode set for a cluster is put aside while the private Ray runs, and back when it stops.
* Ray's own files (Unix sockets, logs, spilled objects, which Ray makes writable by every account,
  /tmp/ray by default) go in the same 0700 folder; they are removed when the instance stops, the
  folder when the process ends (or, for a process killed with SIGKILL, at the next start).
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from ray_setup.installed import import_ray, ray_version_problem
from ray_setup.loopback import LOCAL_ONLY_VARIABLE, LOOPBACK
from ray_setup.ray_internals import TOKEN_NOTICE_LOGGER, end_autoscaler_monitor, internals_refusal
from ray_setup.token_folder import PRIVATE_PREFIX, TOKEN_FILE, make_token_folder

# What a private instance replaces while it runs: a token or a mode set for a cluster must not
# decide the private instance's token, nor turn its authentication off.
_REPLACED = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")

_private: dict[str, Any] = {}  # this process's token folder; while a private Ray runs, the variables it replaced

# Ray's notice, as it starts an instance of its own, that it turned token authentication on there
# and how to turn it off (RAY_AUTH_MODE=disabled, the opposite of docs/ray.md): nothing to act on
# for a private instance, which only this command's processes join and which ends with it. A
# cluster's notices are left alone.
RAY_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


def _not_private_token_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(RAY_TOKEN_NOTICE)


def private_ray_running() -> bool:
    return "replaced" in _private


def start_private_ray(num_cpus: int, **options: Any) -> Any:
    """A new Ray on this machine for this user alone (see the module's docstring), with `num_cpus`
    logical CPUs; `options` go to `ray.init`. Returns the `ray` module. `stop_ray` stops it."""
    if (problem := ray_version_problem()) is not None:
        raise RuntimeError(f"expected {problem}")
    if private_ray_running():  # stop_ray on the failed start below would stop the running one
        raise RuntimeError("a private Ray is running already in this process")
    os.environ[LOCAL_ONLY_VARIABLE] = "0"
    ray = import_ray()
    if (refusal := internals_refusal()) is not None:
        raise RuntimeError(refusal)
    address = ray.util.get_node_ip_address()  # the address ray.init below will give the node
    if not ipaddress.ip_address(address).is_loopback:
        raise RuntimeError(f"Ray would listen on {address}: it was imported before {LOCAL_ONLY_VARIABLE}=0 was set, "
                           "so no private Ray was started")
    folder = _private_folder()
    logging.getLogger(TOKEN_NOTICE_LOGGER).addFilter(_not_private_token_notice)  # added once however often called
    _private["replaced"] = {name: os.environ.pop(name, None) for name in _REPLACED}
    try:
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(folder / TOKEN_FILE)  # Ray's processes inherit it
        # RAY_AUTH_MODE is unset (above): Ray turns token authentication on for a new local
        # instance itself, and sets RAY_AUTH_MODE=token for the processes it starts.
        ray.init(address="local", _node_ip_address=LOOPBACK, _temp_dir=str(folder / "ray"), include_dashboard=False,
                 num_cpus=num_cpus, **options)
        if os.environ.get("RAY_AUTH_MODE") != "token":
            raise RuntimeError("Ray started without token authentication")
    except BaseException:
        stop_ray()
        _end_processes_naming(folder / "ray")
        raise
    return ray


def _private_folder() -> Path:
    """This process's token folder, made at the first start and removed when the process ends. One
    token per process, not per start: a process reads its token once and keeps it, so a second
    private Ray in the same process (the tests' instances) must have the same token."""
    if "folder" not in _private:
        made = make_token_folder(PRIVATE_PREFIX)
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        _private["folder"] = made
    folder: Path = _private["folder"]
    return folder


def stop_ray() -> None:
    """Disconnects from Ray: a private instance stops (its processes, then its files; its token
    goes when the process ends), a cluster is only left. Nothing happens when this process never
    connected."""
    ray = sys.modules.get("ray")
    if ray is not None:
        if private_ray_running():
            end_autoscaler_monitor()
        ray.shutdown()
    if (replaced := _private.pop("replaced", None)) is not None:
        shutil.rmtree(_private["folder"] / "ray", ignore_errors=True)
        restore_environ(replaced)
        logging.getLogger(TOKEN_NOTICE_LOGGER).removeFilter(_not_private_token_notice)  # a cluster's notice is its own


def restore_environ(saved: dict[str, str | None]) -> None:
    """The variables of `saved` back as they were (None: unset), after a Ray set them for itself."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _end_processes_naming(ray_folder: Path) -> None:
    """What a start that failed part-way left running: `ray.init` raises (say its raylet did not
    register within Ray's 30 s, on a busy machine) without stopping the GCS, monitor, dashboard and
    raylet it had started, nor keeping any record of them that `ray.shutdown` could use; they would
    run until this process ends (a test session's: many minutes). They are this process's children
    whose command line names this instance's folder; each is ended by SIGKILL with everything below
    it (agents and workers rename themselves `ray::…`, so they are found through their parent) and
    reaped."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
            children.setdefault(ppid, []).append(int(entry))
    mine = []
    for pid in children.get(os.getpid(), []):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(ray_folder).encode() in f.read():
                    mine.append(pid)
        except OSError:
            continue
    ending, below = list(mine), list(mine)
    while below:
        below = [child for pid in below for child in children.get(pid, [])]
        ending += below
    for pid in reversed(ending):  # the deepest first, so none is restarted by its parent
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in mine:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
