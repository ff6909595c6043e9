"""A driver joining a Ray cluster: set up as the cluster needs before Ray is imported, refused in one
line when it could not join, and Ray's messages about the cluster kept off its stdout.

* **Its token.** Ray's client sends a token only with `RAY_AUTH_MODE=token`; with the token alone
  in `RAY_AUTH_TOKEN_PATH` (or `RAY_AUTH_TOKEN`, or `~/.ray/auth_token`) it sends none and gets 20
  `InvalidAuthToken` warnings, then a traceback. So a driver that has a token and no mode set uses
  token mode (a cluster without authentication ignores the token).
* **A cluster on this machine's loopback** (tools/local_cluster.py): a driver looks for a raylet at
  its own node address, which Ray sets to the machine's network address unless imported with
  `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`; with the address of such a cluster, that is set.
* **Checked before anything starts** (`cluster_refusal`): something answers at the address, and
  the cluster's GCS takes this driver's token. Otherwise one line naming what to set.
* **Ray's messages.** A driver prints every error the cluster publishes (a raylet's death with 20
  lines of its log, "marked dead" notices) on its stdout, even with `log_to_driver=False`. Those
  messages stay in the nodes' Ray logs; the driver says one line of its own on stderr per node
  lost (`quiet_cluster_messages`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import ipaddress
import os
import re
import signal
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["cluster_refusal", "head_lost", "head_refuses", "prepare_to_join", "quiet_cluster_messages", "watch_head"]

LOCAL_ONLY_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # read once, when `ray` is first imported
_NODE_DEAD = re.compile(r"node id: ([0-9a-f]+) and address: (\S+?)(?: and|\s|$)")


def _target(address: str) -> tuple[str, int] | None:
    """(host, port) of a GCS address (`auto` through RAY_ADDRESS, as Ray reads it); None for a Ray
    Client address (`ray://`) or an `auto` Ray finds by itself."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
    match = re.fullmatch(r"([^\s:/]+):(\d{1,5})", address)
    return (match[1], int(match[2])) if match else None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token_source() -> str | None:
    """Where Ray would read this driver's token from, in Ray's order; None if it has none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if path := os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"RAY_AUTH_TOKEN_PATH={path}"
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.exists() else None


def token_refusal() -> str | None:
    """What is wrong with the token this driver would send, before Ray reads it: a token file named
    by RAY_AUTH_TOKEN_PATH (or the default ~/.ray/auth_token) that is missing, empty, or not a
    regular file (a folder; a FIFO, which would hang Ray's read), as one refusal's message."""
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if os.environ.get("RAY_AUTH_TOKEN") or (not named and not os.path.lexists(Path.home() / ".ray" / "auth_token")):
        return None
    where = f"RAY_AUTH_TOKEN_PATH={named}" if named else str(Path.home() / ".ray" / "auth_token")
    path = Path(named) if named else Path.home() / ".ray" / "auth_token"
    expected = f"{where}: expected the cluster's token file (a regular file holding the token, mode 0600)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, and is refused below
    except OSError as e:
        return f"{expected}; {e.strerror or type(e).__name__}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"{expected}; this is a folder, FIFO, device or socket"
        if not os.read(fd, 4096).strip():
            return f"{expected}; it is empty"
    finally:
        os.close(fd)
    return None


def prepare_to_join(address: str) -> None:
    """The environment Ray reads at import (see the module's docstring). Before `import ray`."""
    target = _target(address)
    if target is not None and _is_loopback(target[0]) and "ray" not in sys.modules:
        os.environ[LOCAL_ONLY_VARIABLE] = "0"
    if "RAY_AUTH_MODE" not in os.environ and _token_source() is not None:
        os.environ["RAY_AUTH_MODE"] = "token"


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Ray's C++ client warns on file descriptor 2 at each refused try: the refusal says it in one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cluster_refusal(address: str, option: str = "--ray-address") -> str | None:
    """Why this driver cannot join the cluster at `address`, as one refusal's message; None if it
    can (or if it cannot be checked before `ray.init`: a Ray Client address). Imports Ray."""
    target = _target(address)
    if target is None:
        return None
    if (refusal := token_refusal()) is not None:
        return refusal
    prepare_to_join(address)
    host, port = target
    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError as e:
        return f"{option} {address}: expected a running Ray cluster's address (nothing answers at {host}:{port}: {e.strerror or e})"
    raylet: Any = importlib.import_module("ray._raylet")  # Ray's compiled client (no types to read)

    try:
        with _stderr_silenced():
            raylet.GcsClient(address=f"{host}:{port}").internal_kv_get(b"", None, timeout=30)
    except Exception as e:  # Ray's own classes, whatever module a version defines them in
        if type(e).__name__ != "AuthenticationError":
            return f"{option} {address}: expected a Ray cluster's GCS there ({_first_line(e)})"
        if (source := _token_source()) is None:
            return (f"{option} {address}: expected this driver to have the cluster's token: set RAY_AUTH_TOKEN_PATH "
                    "to the cluster's token file (mode 0600)")
        if (mode := os.environ.get("RAY_AUTH_MODE")) != "token":  # Ray sends the token in token mode only
            return (f"{option} {address}: expected RAY_AUTH_MODE=token or unset: RAY_AUTH_MODE={mode} sends no token, "
                    f"not even the one in {source}, and this cluster asks for its own")
        return (f"{option} {address}: expected the cluster's own token, but it refused the one in {source}: "
                "set RAY_AUTH_TOKEN_PATH to the cluster's token file (mode 0600)")
    return None


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def quiet_cluster_messages() -> None:
    """Once connected: the errors the cluster publishes no longer reach this driver's stdout; a node
    lost becomes one line on stderr. Ray's driver prints them through `print_to_stdstream` of its
    worker module, looked up at each message, so that function is replaced (for this process)."""
    from ray._private import worker

    original = getattr(worker, "_print_to_stdstream_of_ray", worker.print_to_stdstream)
    said: set[str] = set()

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":  # a task's own output (log_to_driver): Ray's handling as it is
            original(data, ignore_prefix)
            return
        if _head_lost.is_set():  # nothing is replaced on a cluster without its head: the driver's own line says so
            return
        for line in data.get("lines", []):
            if (match := _NODE_DEAD.search(str(line))) and match[1] not in said:
                said.add(match[1])
                print(f"ray: node {match[1][:12]} ({match[2]}) was lost; what ran there is replaced on the other "
                      "nodes (Ray's account is in that node's Ray logs)", file=sys.stderr, flush=True)

    worker._print_to_stdstream_of_ray = original
    worker.print_to_stdstream = to_stderr


_CLIENT_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\] ")
_END = b"\0end of the driver's stderr\0\n"


def _client_logs_to_file(path: Path) -> None:
    """Ray's client in this process (C++) logs to file descriptor 2, in its own format, what a
    driver that watches its head says itself (a task whose node was lost, a GCS gone). From here on, fd 2 is a pipe: its
    lines in that format go to `path` (while it can be written), every other line to the real
    stderr; at exit fd 2 is put back once every line before has been passed on."""
    sys.stderr.flush()
    real, (read, write) = os.dup(2), os.pipe()
    os.dup2(write, 2)
    os.close(write)

    def pump() -> None:
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                if line == _END:
                    return
                if _CLIENT_LOG_LINE.match(line):
                    with contextlib.suppress(OSError), path.open("ab") as log:
                        log.write(line)
                else:
                    os.write(real, line)

    pumping = threading.Thread(target=pump, name="ray-client-log", daemon=True)
    pumping.start()

    def put_back() -> None:
        sys.stderr.flush()
        os.write(2, _END)
        pumping.join(timeout=10)
        os.dup2(real, 2)

    atexit.register(put_back)


_head_lost = threading.Event()
_head_raylet: list[tuple[str, int]] = []  # the head node's raylet, (host, port), once `watch_head` has looked


def head_lost() -> bool:
    """Whether `watch_head` saw this driver's cluster lose its head."""
    return _head_lost.is_set()


def lost_now(address: str | None) -> bool:
    """Whether the head at `address` is gone, looked at now: for a driver whose tasks ended with
    Ray's errors for a lost node, which can come before the watcher's next look. Once seen here,
    the watcher sends no Ctrl-C."""
    if address is not None and not _head_lost.is_set() and head_refuses(address):
        _head_lost.set()
    return _head_lost.is_set()


def head_refuses(address: str) -> bool:
    """Whether the head at `address` is gone, looked at now: its GCS port refuses a connection, or
    the port of the head node's raylet does (once `watch_head` has learned it). The raylet goes
    first: its tasks fail at once, while the GCS may still answer for a moment (the node's processes
    are ended after it). A slow answer is a busy head, not a lost one."""
    target = _target(address)
    if target is None:
        return False
    return any(_refuses(port) for port in (target, *_head_raylet))


def _refuses(target: tuple[str, int]) -> bool:
    try:
        socket.create_connection(target, timeout=10).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def watch_head(address: str, period_s: float = 0.5, interrupt: bool = True) -> None:
    """Once connected to the cluster at `address`: from a daemon thread, the head is looked at every
    `period_s` (`head_refuses`); when it is gone (and the cluster with it), `head_lost()`
    turns true and, with `interrupt`, this process gets a SIGINT, so its driver stops its work as a
    Ctrl-C does and says in one line how to go on (a training run's pool asks `head_lost()` itself
    while it waits for its actors, since its Ctrl-C means a person's stop). Left alone, Ray's client
    would wait a minute for the GCS, then end the process with its own account."""
    import ray
    from ray._private import worker

    if _target(address) is None:
        return
    _head_raylet[:] = [(n["NodeManagerAddress"], int(n["NodeManagerPort"])) for n in ray.nodes()
                       if n["Alive"] and "node:__internal_head__" in n["Resources"]][:1]
    # What Ray's client says of the loss (its GCS gone, tasks it cannot report) goes to its log folder.
    _client_logs_to_file(Path(worker.global_worker.node.get_logs_dir_path()) / f"driver-{os.getpid()}-client.log")
    main = threading.main_thread().ident
    assert main is not None

    def watch() -> None:
        while not _head_lost.wait(period_s):
            if head_refuses(address):
                _head_lost.set()
                if interrupt:
                    # To the main thread itself: where it blocks SIGINT while it writes a record
                    # whole, the stop waits until that is done.
                    signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=watch, name="ray-head-watch", daemon=True).start()
