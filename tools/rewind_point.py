"""What the per-update rewind point costs a training run.

    python tools/rewind_point.py [UPDATES]

Before every update, `TrainingRun` keeps the state it would checkpoint if a stop cut the update
short (`Trainer.state_dict`: one round trip to every worker for its games' emulator states, and
references to the learner's tensors, which the update's all-or-nothing rollback restores). This
times that against whole updates of a plain run's config on this machine, in one process, and
prints the median of each and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from configs.launch import launch_config
from configs.machine import usable_cores
from game.vector import game_specs, make_pool
from ppo.seeding import derive_seeds
from ppo.trainer import Trainer


def main(updates: int) -> None:
    config, _ = launch_config({}, usable_cores())  # a plain run's games and grouping here
    seeds = derive_seeds(config.seed, config.n_envs)
    with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
        trainer = Trainer(config, pool, seeds, torch.device("cpu"))
        trainer.reset_envs()
        rewind, update = [], []
        for _ in range(updates + 1):  # the first of each is a warm-up
            started = time.perf_counter()
            trainer.state_dict(dict(trainer.live_in_use))
            kept = time.perf_counter()
            trainer.iteration()
            rewind.append(kept - started)
            update.append(time.perf_counter() - kept)
    r, u = statistics.median(rewind[1:]), statistics.median(update[1:])
    print(f"{config.n_workers} × {config.envs_per_worker} games: rewind point {r * 1e3:.2f} ms, update {u * 1e3:,.0f} ms, "
          f"{100 * r / u:.2f}% of an update")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
