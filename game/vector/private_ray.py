"""Starting Ray for this user alone, and joining a cluster: the one place that calls `ray.init`.

A private Ray (`--backend ray` without an address, a local sweep or population, the tests'
instance) is reachable from this user's processes only:

* Every port on loopback. Ray gives its node the machine's network address, and its servers (GCS,
  raylet, every worker, the object manager, the runtime-env and dashboard agents, the metrics
  export) then listen on every interface. With the node's address 127.0.0.1 they listen on
  loopback. `ray.init` turns a loopback `_node_ip_address` back into the network address unless
  Ray was imported with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (Ray's switch for a single-machine
  Ray), so that variable is set before the first `import ray`, and the address Ray will use is
  checked before anything starts.
* Token authentication on, with a token of its own: 256 random bits in a file created
  with mode 0600 (O_EXCL, never through a link) in a fresh 0700 folder, named to Ray by
  `RAY_AUTH_TOKEN_PATH`. The file exists with its final mode before Ray reads it, so no moment
  exists when another account could read it (Ray's own `~/.ray/auth_token` is written with the
  umask's mode, 0644 with the usual umask); and a token that leaked from such a file before does
  not open this instance. Ray's own files (Unix sockets, logs, spilled objects, which Ray makes
  writable by every account) go in that folder too, out of the shared /tmp/ray; they are removed
  when the instance stops, the folder when the process ends (or, for a process killed with
  SIGKILL, at the next start: `stale_ray_folders`).
* Ray 2.60 or newer: the version whose sources and behaviour were checked for both points above
  (with Ray 2.58, a client without a token replaced a sweep's trial function through the GCS).

Joining a cluster (`join_ray_cluster`) uses the cluster's own token (`RAY_AUTH_TOKEN`,
`RAY_AUTH_TOKEN_PATH` or `~/.ray/auth_token`); a token file of this user's that other accounts can
read is made 0600 first. What a cluster needs beyond that is in docs/ray.md.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import importlib.util
import ipaddress
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from game.vector.ray_cluster import LOCAL_ONLY_VARIABLE, cluster_refusal, prepare_to_join, quiet_cluster_messages
from game.vector.stale_ray_folders import PREFIX, remove_stale_folders, write_owner

__all__ = ["INSTALL_HINT", "MIN_RAY", "cluster_refusal", "import_ray", "join_ray_cluster", "prepare_to_join",
           "quiet_cluster_messages", "ray_connected", "ray_installed", "ray_node_id", "ray_refusal", "ray_version_problem",
           "start_private_ray", "stop_ray", "tighten_token_file"]

INSTALL_HINT = 'pip install -e ".[ray]"'
MIN_RAY = (2, 60)
LOOPBACK = "127.0.0.1"
# What a private instance replaces while it runs: a token or a mode set for a cluster must not
# decide the private instance's token, nor turn its authentication off.
_REPLACED = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")

_private: dict[str, Any] = {}  # this process's token folder; while a private Ray runs, the variables it replaced


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def import_ray() -> Any:
    """The `ray` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"the ray backend needs Ray, an optional extra: {INSTALL_HINT}") from e
    return ray


def ray_version_problem() -> str | None:
    """What is wrong with the installed Ray's version, as the end of an `expected …` line; None
    when it is recent enough (or when Ray is not installed: that is said elsewhere). Read from the
    package's metadata, so nothing is imported or started."""
    try:
        version = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return None
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    if numbers >= MIN_RAY:
        return None
    need = ".".join(map(str, MIN_RAY))
    return (f"Ray {need} or newer, whose private instance listens on loopback only and refuses clients "
            f"without its token (this is Ray {version}): {INSTALL_HINT}")


def ray_refusal(what: str) -> str | None:
    """The one line refusing `what` ("sweeps", …) where Ray is missing or too old; None if it can run."""
    if not ray_installed():
        return f"{what} run on Ray, which is not installed: {INSTALL_HINT}"
    if (problem := ray_version_problem()) is not None:
        return f"{what} run on Ray: expected {problem}"
    return None


def ray_node_id() -> str | None:
    """The Ray node this process runs on (a sweep trial's, a member's; the node a driver joined
    through), or None when it is connected to no Ray."""
    return sys.modules["ray"].get_runtime_context().get_node_id() if ray_connected() else None


def ray_connected() -> bool:
    """Whether this process is connected to a Ray already (a sweep trial, a test's instance)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


# Ray's notice, as it starts an instance of its own, that it turned token authentication on there
# and how to turn it off (RAY_AUTH_MODE=disabled, the opposite of docs/ray.md): nothing to act on
# for a private instance, which only this command's processes join and which ends with it. A
# cluster's notices are left alone.
RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
RAY_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


def _not_private_token_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(RAY_TOKEN_NOTICE)


def start_private_ray(num_cpus: int, **options: Any) -> Any:
    """A new Ray on this machine for this user alone (see the module's docstring), with `num_cpus`
    logical CPUs; `options` go to `ray.init`. Returns the `ray` module. `stop_ray` stops it."""
    if (problem := ray_version_problem()) is not None:
        raise RuntimeError(f"expected {problem}")
    if "replaced" in _private:  # stop_ray on the failed start below would stop the running one
        raise RuntimeError("a private Ray is running already in this process")
    os.environ[LOCAL_ONLY_VARIABLE] = "0"
    ray = import_ray()
    address = ray.util.get_node_ip_address()  # the address ray.init below will give the node
    if not ipaddress.ip_address(address).is_loopback:
        raise RuntimeError(f"Ray would listen on {address}: it was imported before {LOCAL_ONLY_VARIABLE}=0 was set, "
                           "so no private Ray was started")
    folder = _private_folder()
    logging.getLogger(RAY_TOKEN_LOGGER).addFilter(_not_private_token_notice)  # added once however often called
    _private["replaced"] = {name: os.environ.pop(name, None) for name in _REPLACED}
    try:
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(folder / "auth_token")  # Ray's processes inherit it
        # RAY_AUTH_MODE is unset (above): Ray turns token authentication on for a new local
        # instance itself, and sets RAY_AUTH_MODE=token for the processes it starts.
        # Ray's own files (its sockets, logs, spilled objects) go inside the 0700 folder too: Ray
        # makes its temp folder writable by every account (mode 0777, /tmp/ray by default).
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
    """This process's 0700 folder holding the private Ray's token (mode 0600) and Ray's files; made
    at the first start, removed when the process ends. One token per process, not per start: a
    process reads its token once and keeps it, so a second private Ray in the same process (the
    tests' instances) must have the same token."""
    if "folder" not in _private:
        remove_stale_folders(Path(tempfile.gettempdir()))
        made = Path(tempfile.mkdtemp(prefix=PREFIX))  # mode 0700
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        write_owner(made)
        fd = os.open(made / "auth_token", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        _private["folder"] = made
    folder: Path = _private["folder"]
    return folder


def join_ray_cluster(address: str, **options: Any) -> Any:
    """`ray.init(address=address, **options)`, this user's token file made unreadable to others
    first, the driver set to use the cluster's token (`prepare_to_join`), and Ray's messages to
    the driver kept off its stdout (`quiet_cluster_messages`). Returns the `ray` module."""
    tighten_token_file()
    prepare_to_join(address)
    ray = import_ray()
    ray.init(address=address, **options)
    quiet_cluster_messages()
    return ray


def stop_ray() -> None:
    """Disconnects from Ray: a private instance stops (its processes, then its files; its token
    goes when the process ends), a cluster is only left. Nothing happens when this process never
    connected."""
    ray = sys.modules.get("ray")
    if ray is not None:
        if "replaced" in _private:
            _end_autoscaler_monitor()
        ray.shutdown()
    if (replaced := _private.pop("replaced", None)) is not None:
        shutil.rmtree(_private["folder"] / "ray", ignore_errors=True)
        for name, value in replaced.items():
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


def _end_autoscaler_monitor() -> None:
    """The private instance's autoscaler monitor, ended by SIGKILL before `ray.shutdown`: a node of a
    fixed size has nothing for it to do or save. Left to `ray.shutdown`, every stop waited a second
    for it: Ray stops the GCS first, then sends the monitor a SIGTERM whose handler reports to that
    GCS (a call that waits up to 60 s), gives it Ray's one-second grace and kills it anyway. Ray's
    start has no switch for the monitor, so it is found in Ray's record of the processes it started;
    if a later Ray keeps that record elsewhere, nothing is done here and the stop is as slow as
    before, never wrong."""
    node = getattr(sys.modules.get("ray._private.worker"), "_global_node", None)
    for info in getattr(node, "all_processes", {}).get("monitor", []):
        process = getattr(info, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def tighten_token_file() -> None:
    """The token file Ray will read for a cluster, made 0600 if it is this user's and others can
    read it (`ray start` writes ~/.ray/auth_token with the umask's mode). A file of another
    account's is left as it is: not ours to change."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return  # the token is in the environment, no file is read
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # none there (Ray says so itself if the cluster needs one), or a link: not followed
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
