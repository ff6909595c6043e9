"""A 0700 folder holding a 0600 token, named after the process that made it: a private Ray's
(`ray-private-*`, ray_setup/private.py) and a local cluster's (`ray-cluster-*`, tools/local_cluster.py).

The token is 256 random bits in a file created with mode 0600 (O_EXCL, never through a link) in a
fresh 0700 folder, before any Ray process reads it: no moment exists when another account could
read it (Ray's own `~/.ray/auth_token` is written with the umask's mode, 0644 with the usual umask).

A process removes its folder as it exits; one killed with SIGKILL cannot, and its folder (the
token, Ray's logs and sockets, spilled objects) stays in the temporary folder. Each folder holds
an `owner` file naming the process that made it: its pid and when it started, so a later process
with the same pid is not taken for it. The next start of the same kind removes the folders of this
account whose owner is provably gone and whose Ray is gone too (no process names the folder in its
command line or environment: Ray's servers and workers all do). A folder whose owner cannot be
read (being written, or made by an older version), another account's, or anything but a plain
folder is left alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

PRIVATE_PREFIX = "ray-private-"
CLUSTER_PREFIX = "ray-cluster-"
TOKEN_FILE = "auth_token"
OWNER_FILE = "owner"
# psutil reads a start time in clock ticks (1/100 s) after boot: the same process always gives the
# same value, another one started under a reused pid a later one.
SAME_START_S = 0.005


def write_owner(folder: Path) -> None:
    """Name this process as `folder`'s owner (a new 0700 folder of its own: nothing else is in it)."""
    import psutil

    started = psutil.Process().create_time()
    fd = os.open(folder / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()} {started!r}\n")


def make_token_folder(prefix: str) -> Path:
    """A fresh 0700 folder `prefix`* in the temporary folder, owned by this process (`write_owner`),
    holding TOKEN_FILE; the stale folders of the same prefix removed first. Its maker removes it."""
    root = Path(tempfile.gettempdir())
    remove_stale_folders(root, prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))  # mode 0700
    write_owner(folder)  # so that the next start removes it if this process cannot (a SIGKILL)
    fd = os.open(folder / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return folder


def remove_stale_folders(root: Path, prefix: str) -> list[Path]:
    """Remove the folders named `prefix`* under `root` (the temporary folder) that this account's
    dead processes left; returns those removed."""
    stale = [folder for folder in sorted(root.glob(prefix + "*")) if _owner_gone(folder)]
    if not stale:
        return []
    in_use = _named_by_processes(stale)
    removed = []
    for folder in stale:
        if folder not in in_use:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _owner_gone(folder: Path) -> bool:
    """Whether `folder` is a folder of this account's whose owner process has provably ended."""
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        fd = os.open(folder / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd) as f:
        text = f.read(100)
    try:
        pid_text, started_text = text.split()
        pid, started = int(pid_text), float(started_text)
    except ValueError:
        return False  # not written whole yet
    return not _running(pid, started)


def _running(pid: int, started: float) -> bool:
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - started) < SAME_START_S
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # it exists, and cannot be told apart: kept


def _named_by_processes(folders: list[Path]) -> set[Path]:
    """Those of `folders` that a live process (other than this one) names in its command line or
    environment: a Ray server or worker of that instance that is still stopping, say."""
    import psutil

    names = {str(folder): folder for folder in folders}
    named: set[Path] = set()
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        texts: list[str] = []
        with contextlib.suppress(psutil.Error):
            texts += process.cmdline()
        with contextlib.suppress(psutil.Error):
            texts += process.environ().values()
        named.update(folder for name, folder in names.items() if any(name in text for text in texts))
    return named
