"""Many games stepped together (`EnvPool`), over one of three transports:

* `local` (default): `PipePool`, worker processes on this machine, frames in shared memory;
* `ray`: `RayPool`, Ray actors on a Ray cluster (`ray_address`), or on a private local Ray
  instance when no address is given. Ray is an optional extra, imported only when chosen;
* `serial`: `SerialPool`, every game in the trainer's own process (fast tests, debugging).

The trainer never knows which one it has. `make_pool` takes anything with the run's settings as
attributes (a `configs.ppo.PPOConfig`): this package imports nothing of the learner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from game.atari import GameSpec
from game.vector.group import StepEvents
from game.vector.pipe import PipePool
from game.vector.pool import EnvPool, RestartPolicy, StepBatch
from game.vector.protocol import ClusterLost, PoolError, WorkerDied, WorkerError, WorkerKeepsFailing, WorkerTimeout
from game.vector.serial import SerialPool

# The transports `make_pool` knows; configs/fields.py spells them again (tests/test_architecture.py keeps them equal).
BACKENDS = ("local", "ray", "serial")

__all__ = ["BACKENDS", "ClusterLost", "EnvPool", "PipePool", "PoolError", "RestartPolicy", "SerialPool", "StepBatch", "StepEvents",
           "WorkerDied", "WorkerError", "WorkerKeepsFailing", "WorkerTimeout", "game_specs", "make_pool"]


class PoolSettings(Protocol):
    """What `make_pool` reads of a run's settings (read only: a run's config is frozen)."""

    @property
    def backend(self) -> str: ...
    @property
    def envs_per_worker(self) -> int: ...
    @property
    def worker_timeout(self) -> float: ...
    @property
    def max_worker_restarts(self) -> int: ...
    @property
    def restart_window(self) -> int: ...
    @property
    def ray_address(self) -> str | None: ...
    @property
    def ray_cpus_per_worker(self) -> float: ...

    def to_dict(self) -> dict[str, Any]: ...


def game_specs(settings: PoolSettings, env_seeds: Sequence[int]) -> list[GameSpec]:
    """One `GameSpec` per env: the run's game settings, each env with its own derived seed."""
    values = settings.to_dict()
    return [GameSpec.from_settings(values, seed) for seed in env_seeds]


def make_pool(settings: PoolSettings, specs: Sequence[GameSpec]) -> EnvPool:
    """The pool `settings.backend` names, for the envs `specs` describes."""
    common: dict[str, Any] = {"envs_per_worker": settings.envs_per_worker, "timeout_s": settings.worker_timeout,
                              "restarts": RestartPolicy(settings.max_worker_restarts, settings.restart_window)}
    if settings.backend == "local":
        return PipePool(specs, **common)
    if settings.backend == "serial":
        return SerialPool(specs, **common)
    if settings.backend == "ray":
        from game.vector.ray_actors import RayPool  # deferred: Ray is optional and slow to import

        return RayPool(specs, **common, address=settings.ray_address, cpus_per_worker=settings.ray_cpus_per_worker)
    raise ValueError(f"unknown backend {settings.backend!r}: expected one of {', '.join(BACKENDS)}")
