"""What a config cannot say about this machine, checked once before a run starts anything."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from configs.fields import ConfigError
from configs.ppo import PPOConfig
from game.atari import relaunch_refusal
from game.vector.private_ray import ray_version_problem
from ppo.devices import resolve_device, resolve_precision


def check_can_start(config: PPOConfig, run_dir: Path | None = None) -> None:
    """What the config cannot say about this machine, checked before any process starts or any
    file is written: the device exists and has the precision asked for, a Ray backend's Ray is
    recent enough, and the run's folder can be created and written. `ConfigError` (one line naming the option) otherwise."""
    resolve_precision(config.precision, resolve_device(config.device))  # a missing GPU; bf16 where the hardware has none
    if config.backend == "ray" and (problem := ray_version_problem()) is not None:
        raise ConfigError("backend", config.backend, problem)  # one that cannot keep a private Ray private
    if config.fire_on_reset and (refusal := relaunch_refusal(config.game, config.relaunch)):
        raise ConfigError("relaunch", config.relaunch, refusal)  # a game without RIGHT, refused here rather than in every worker
    data_dir = config.data_dir
    targets = [Path(data_dir) / config.name] + ([run_dir, run_dir / "checkpoints"] if run_dir is not None else [])
    for target in targets:
        existing = target
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError("data_dir", data_dir, f"a folder ({existing} is not a folder)")
        try:  # a real write, not os.access: root, read-only mounts and ACLs all answer truthfully
            os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=existing))
        except OSError as e:
            raise ConfigError("data_dir", data_dir, f"a folder this user can write to ({existing}: {e.strerror})") from None
