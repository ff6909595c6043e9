"""Which pool runs the games: `make_pool(config, specs)` reads `config.backend`.

* `local` (default): `PipePool`, worker processes on this machine, frames in shared memory;
* `ray`: `RayPool`, Ray actors on a Ray cluster (`config.ray_address`), or on a private local
  Ray instance when no address is given. Ray is an optional extra, imported only here.

Both implement `EnvPool`; the trainer never knows which one it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from game.atari import GameSpec
from game.pool import EnvPool, PipePool

if TYPE_CHECKING:  # configs.ppo imports nothing heavy, but game/ should not need it at run time
    from configs.ppo import PPOConfig

BACKENDS = ("local", "ray")


def game_specs(config: PPOConfig, env_seeds: Sequence[int]) -> list[GameSpec]:
    """One `GameSpec` per env: the run's game settings, each env with its own derived seed."""
    settings = config.to_dict()
    return [GameSpec.from_settings(settings, seed) for seed in env_seeds]


def make_pool(config: PPOConfig, specs: Sequence[GameSpec]) -> EnvPool:
    """The pool `config.backend` names, for the envs `specs` describes."""
    if config.backend == "local":
        return PipePool(specs, config.envs_per_worker, config.worker_timeout)
    if config.backend == "ray":
        from game.ray_pool import RayPool  # deferred: Ray is optional and slow to import

        return RayPool(specs, config.envs_per_worker, config.worker_timeout,
                       address=config.ray_address, cpus_per_worker=config.ray_cpus_per_worker)
    raise ValueError(f"unknown backend {config.backend!r}: expected one of {', '.join(BACKENDS)}")
