"""Limits a config must keep on the machine it runs on, and URLs it must be able to parse: checked by
`configs.ppo.validate` before anything starts, so a value the machine cannot take is one line
rather than a thousand processes, a buffer larger than the memory, or a traceback."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

FRAME_BYTES = 84 * 84  # one processed frame (game/atari.py FRAME_SIZE²), uint8
WORKERS_PER_CORE = 8  # past this, worker processes only add switching (and an emulator's memory each)
MIN_WORKERS_CAP = 16  # a small machine may still run the usual 8 or 16 processes


def usable_cores() -> int:
    """The cores this process may run on (its affinity: `taskset`, a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def max_local_workers() -> int:
    return max(MIN_WORKERS_CAP, WORKERS_PER_CORE * usable_cores())


def shared_cores_environment() -> dict[str, str]:
    """Environment for training runs started alongside others on the same cores (`curves --jobs` of
    2 or more, a sweep's trials, a population's members): torch's OpenMP threads sleep when they run
    out of work instead of spinning (libgomp's default), which burns the core another run needs
    (docs/benchmarks.md, "Several runs on one machine"). A run alone gains nothing from it, so a plain run keeps the default; a value the user set wins."""
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def memory_bytes() -> int | None:
    """This machine's physical memory, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def local_workers_problem(n_workers: int) -> str | None:
    """What is wrong with `n_workers` processes on this machine (the "accepted" text), or None."""
    cap = max_local_workers()
    if n_workers <= cap:
        return None
    return (f"at most {cap} worker processes on this machine's {usable_cores()} usable cores ({WORKERS_PER_CORE} a core; "
            "--envs-per-worker puts more games in each)")


def rollout_problem(n_workers: int, envs_per_worker: int, worker_steps: int, frame_stack: int) -> str | None:
    """What is wrong with a rollout of this size here (the "accepted" text), or None: its
    observations alone must fit in half the machine's memory. Each of the four options is named,
    since any of them, given alone on the command line, can be the one that broke the product."""
    needed = n_workers * envs_per_worker * worker_steps * frame_stack * FRAME_BYTES
    memory = memory_bytes()
    if memory is None or needed <= memory // 2:
        return None
    return (f"a rollout whose observations fit in half this machine's memory ({n_workers} n_workers × {envs_per_worker} "
            f"envs_per_worker × {worker_steps} worker_steps × {frame_stack} frame_stack × 84 × 84 bytes = "
            f"{needed / 2**30:.1f} GiB; {memory / 2**30:.1f} GiB here)")


def url_problem(url: str) -> str | None:
    """What is wrong with `url` as an http(s) URL with a host (the "accepted" text), or None."""
    accepted = "an http(s) URL such as http://127.0.0.1:5005/api/v1/default"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
    except ValueError as e:
        return f"{accepted} ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return accepted
    return None
