"""How a run's games are spread over worker processes on this machine: a speed setting only (the
games, the batch and every number learned stay the same)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from configs.ppo import PPOConfig


def grouped_for_cores(config: PPOConfig, cores: int) -> PPOConfig:
    """The same games grouped into as many worker processes as there are cores: the largest
    divisor of the number of games that is ≤ `cores` (8 games: 1 core → 1 × 8, 2–3 → 2 × 4,
    4–7 → 4 × 2, 8 or more → 8 × 1). More processes than cores only adds switching between them
    (README, Throughput: 2 × 4 beats 8 × 1 on 2 cores). Grouping is a speed setting only: the games,
    the batch and every number learned stay the same (tests/test_trainer.py checks it bit for bit)."""
    games = config.n_envs
    workers = max(d for d in range(1, min(games, max(cores, 1)) + 1) if games % d == 0)
    return dataclasses.replace(config, n_workers=workers, envs_per_worker=games // workers)


def machine_groups(config: PPOConfig, overrides: Mapping[str, Any]) -> bool:
    """Whether this machine groups the games (by its cores): not when the command line (`overrides`)
    chose the grouping, nor when the games run as Ray actors."""
    return config.backend == "local" and not {"n_workers", "envs_per_worker"} & overrides.keys()
