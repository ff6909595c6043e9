"""Whether Ray is here, recent enough, and connected: read without starting anything.

Ray is optional (`pip install -e ".[ray]"`): every command that needs it says so in one line, and
`import game` works without it. 2.60 is the version whose sources and behaviour were checked for a
private Ray's two guarantees (loopback only; no client without its token: with Ray 2.58, a client
without a token replaced a sweep's trial function through the GCS). What a newer Ray may have moved
is checked by ray_setup/ray_internals.py when Ray is first used.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from typing import Any

INSTALL_HINT = 'pip install -e ".[ray]"'
MIN_RAY = (2, 60)


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


def ray_connected() -> bool:
    """Whether this process is connected to a Ray already (a sweep trial, a test's instance)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def ray_node_id() -> str | None:
    """The Ray node this process runs on (a sweep trial's, a member's; the node a driver joined
    through), or None when it is connected to no Ray."""
    return sys.modules["ray"].get_runtime_context().get_node_id() if ray_connected() else None
