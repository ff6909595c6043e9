"""A driver joining a Ray cluster: set up as the cluster needs before Ray is imported, and refused
in one line, before anything starts, when it could not join.

* **Its token.** Ray's client sends a token only with `RAY_AUTH_MODE=token`; with the token alone
  in `RAY_AUTH_TOKEN_PATH` (or `RAY_AUTH_TOKEN`, or `~/.ray/auth_token`) it sends none and gets 20
  `InvalidAuthToken` warnings, then a traceback. So a driver that has a token and no mode set uses
  token mode (a cluster without authentication ignores the token). A token file of this user's
  that other accounts can read is made 0600 first (`ray start` writes ~/.ray/auth_token with the
  umask's mode).
* **A cluster on this machine's loopback** (tools/local_cluster.py): a driver looks for a raylet at
  its own node address, which Ray sets to the machine's network address unless imported with the
  loopback switch (ray_setup/loopback.py); with the address of such a cluster, that is set.
* **Checked before anything starts** (`cluster_refusal`): the token file is one, something answers
  at the address, and the cluster's GCS takes this driver's token. Otherwise one line naming what
  to set.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ray_setup.errors import first_line
from ray_setup.loopback import LOCAL_ONLY_VARIABLE, gcs_target, is_loopback
from ray_setup.ray_internals import gcs_answers, internals_refusal


def _default_token() -> Path:
    return Path.home() / ".ray" / "auth_token"


class TokenFile(NamedTuple):
    where: str  # as a message names it
    path: Path
    named: bool  # by RAY_AUTH_TOKEN_PATH (else Ray's default, which may not exist)


def _token_file() -> TokenFile | None:
    """The file Ray would read this driver's token from, in Ray's order: none when the token is in
    the environment (RAY_AUTH_TOKEN), else the one RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return None
    if named := os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return TokenFile(f"RAY_AUTH_TOKEN_PATH={named}", Path(named), True)
    return TokenFile(str(_default_token()), _default_token(), False)


def _token_source() -> str | None:
    """Where Ray would read this driver's token from; None if it has none."""
    if (file := _token_file()) is None:
        return "RAY_AUTH_TOKEN"
    return file.where if file.named or file.path.exists() else None


def token_refusal() -> str | None:
    """What is wrong with the token this driver would send, before Ray reads it: a token file named
    by RAY_AUTH_TOKEN_PATH (or the default ~/.ray/auth_token) that is missing, empty, or not a
    regular file (a folder; a FIFO, which would hang Ray's read), as one refusal's message."""
    file = _token_file()
    if file is None or (not file.named and not os.path.lexists(file.path)):
        return None
    where, path = file.where, file.path
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
    tighten_token_file()
    target = gcs_target(address)
    if target is not None and is_loopback(target[0]) and "ray" not in sys.modules:
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
    target = gcs_target(address)
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
    if (refusal := internals_refusal()) is not None:
        return refusal
    try:
        with _stderr_silenced():
            gcs_answers(host, port)
    except Exception as e:  # Ray's own classes, whatever module a version defines them in
        if type(e).__name__ != "AuthenticationError":
            return f"{option} {address}: expected a Ray cluster's GCS there ({first_line(e)})"
        if (source := _token_source()) is None:
            return (f"{option} {address}: expected this driver to have the cluster's token: set RAY_AUTH_TOKEN_PATH "
                    "to the cluster's token file (mode 0600)")
        if (mode := os.environ.get("RAY_AUTH_MODE")) != "token":  # Ray sends the token in token mode only
            return (f"{option} {address}: expected RAY_AUTH_MODE=token or unset: RAY_AUTH_MODE={mode} sends no token, "
                    f"not even the one in {source}, and this cluster asks for its own")
        return (f"{option} {address}: expected the cluster's own token, but it refused the one in {source}: "
                "set RAY_AUTH_TOKEN_PATH to the cluster's token file (mode 0600)")
    return None


def tighten_token_file() -> None:
    """The token file Ray will read for a cluster, made 0600 if it is this user's and others can
    read it. A file of another account's is left as it is: not ours to change."""
    if (file := _token_file()) is None:
        return  # the token is in the environment, no file is read
    path = file.path
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
