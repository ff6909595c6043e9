"""One run seed → every random stream of the run, independent of each other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Seeds:
    env_seeds: list[int]  # one per env: emulator and no-op draws
    torch_seed: int  # action sampling
    numpy_seed: int  # minibatch shuffling


def derive_seeds(seed: int, n_envs: int) -> Seeds:
    # SeedSequence.spawn gives statistically independent children; seed + i would give
    # overlapping streams for some generators and correlated no-op draws across envs.
    env_root, trainer_root = np.random.SeedSequence(seed).spawn(2)
    env_seeds = [int(child.generate_state(1)[0]) for child in env_root.spawn(n_envs)]
    torch_seed, numpy_seed = (int(x) for x in trainer_root.generate_state(2))
    return Seeds(env_seeds, torch_seed, numpy_seed)


def resumed_sampling_seed(torch_seed: int, update: int) -> int:
    """The action-sampling seed of a run resumed at `update` on another kind of device than the one
    that sampled it (see `Trainer.load_state_dict`): a stream apart from the run's first one, and
    the same for every resume from that update, so such a resume can be made again."""
    return int(np.random.SeedSequence([torch_seed, update]).generate_state(1)[0])
