"""The trainer's sampling bookkeeping, checked against the games replayed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from configs.ppo import PPOConfig
from game.atari import Game
from game.vector import PipePool, SerialPool, game_specs
from ppo.seeding import derive_seeds
from ppo.trainer import Trainer
from tests.conftest import train_from_seed


@pytest.mark.parametrize("overlap", [False, True])
def test_rollouts_are_what_the_games_do_with_their_actions(overlap: bool) -> None:
    # Replaying each env's recorded actions in a local Game with the same seed must give back the
    # recorded observations, rewards and done flags step for step, across two rollouts: no
    # off-by-one anywhere, including the double-buffered path where the two halves interleave.
    config = PPOConfig(n_workers=2, envs_per_worker=2, worker_steps=48, overlap_sampling=overlap)
    seeds = derive_seeds(11, config.n_envs)
    specs = game_specs(config, seeds.env_seeds)
    recorded = []
    with PipePool(specs, config.envs_per_worker) as pool:
        trainer = Trainer(config, pool, seeds, torch.device("cpu"))
        trainer.reset_envs()
        for _ in range(2):
            trainer.collect()
            r = trainer.rollout
            recorded.append({k: getattr(r, k).copy() for k in ("observations", "actions", "rewards", "terminals", "truncations")})
    assert trainer.env_steps == 2 * config.batch_size
    for env, spec in enumerate(specs):
        game = Game(spec)
        game.reset()  # as reset_envs did in the worker
        for rollout in recorded:
            for t in range(config.worker_steps):
                np.testing.assert_array_equal(rollout["observations"][env, t], game.observation, err_msg=f"env {env}, t {t}")
                result = game.step(int(rollout["actions"][env, t]))
                assert (rollout["rewards"][env, t], rollout["terminals"][env, t], rollout["truncations"][env, t]) == \
                    (result.reward, result.terminal, result.truncated)
        np.testing.assert_array_equal(trainer.pool.observations[env], game.observation)


def test_overlapped_sampling_is_deterministic() -> None:
    def actions(seed: int) -> np.ndarray:
        config = PPOConfig(n_workers=2, worker_steps=32, overlap_sampling=True)
        seeds = derive_seeds(seed, config.n_envs)
        with PipePool(game_specs(config, seeds.env_seeds)) as pool:
            trainer = Trainer(config, pool, seeds, torch.device("cpu"))
            trainer.reset_envs()
            trainer.collect()
            return trainer.rollout.actions.copy()

    np.testing.assert_array_equal(actions(1), actions(1))


@pytest.mark.slow
def test_how_envs_are_grouped_into_processes_does_not_change_learning() -> None:
    # `envs_per_worker` is a speed setting only: 4 games in 4 processes or in 2 give the same
    # rollout and the same parameters after an update, bit for bit (the README recommends one
    # process per core on small machines on the strength of this).
    def one_update(n_workers: int, envs_per_worker: int) -> tuple[dict[str, np.ndarray], list[torch.Tensor]]:
        return train_from_seed(PPOConfig(n_workers=n_workers, envs_per_worker=envs_per_worker, worker_steps=32, seed=5), updates=1)

    rollout_a, params_a = one_update(4, 1)
    rollout_b, params_b = one_update(2, 2)
    for name in rollout_a:
        np.testing.assert_array_equal(rollout_a[name], rollout_b[name], err_msg=name)
    for a, b in zip(params_a, params_b, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("clip_value_loss", "value_clip_range"), [(False, None), (True, 0.0), (True, 1e9)])
def test_each_update_reports_how_much_of_the_batch_the_value_clip_kept_from_the_critic(
        clip_value_loss: bool, value_clip_range: float | None) -> None:
    # Unclipped, or with a clip no value can reach, no sample loses its gradient. With ε = 0 every
    # sample whose value has moved at all, away from its return, is held at V_old: once Adam has
    # stepped, that is a part of the batch, neither none of it (some values move the wrong way) nor
    # all (the steps lower the value loss on the whole). The exact share depends on the rounding.
    config = PPOConfig(n_workers=1, envs_per_worker=2, worker_steps=32, minibatches=2, epochs=1, seed=3,
                       clip_value_loss=clip_value_loss, value_clip_range=value_clip_range)
    seeds = derive_seeds(config.seed, config.n_envs)
    with SerialPool(game_specs(config, seeds.env_seeds), config.envs_per_worker) as pool:
        trainer = Trainer(config, pool, seeds, torch.device("cpu"))
        trainer.reset_envs()
        fraction = trainer.iteration()["value_clip_fraction"]
    if value_clip_range == 0.0:
        assert 0.0 < fraction < 1.0
    else:
        assert fraction == 0.0


def test_a_snapshot_restores_the_learner_exactly_as_often_as_asked() -> None:
    # What `tools/value_clip.py` relies on to run one update per ε from one point: restore,
    # update, restore, update gives the same parameters, Adam state and shuffle twice, bit for bit.
    # Restoring a snapshot without copying Adam's state fails this: Adam adopts the loaded tensors
    # and steps them in place, so the second update would start where the first one ended.
    config = PPOConfig(n_workers=1, envs_per_worker=2, worker_steps=32, minibatches=2, epochs=1, seed=4)  # two Adam steps an update
    seeds = derive_seeds(config.seed, config.n_envs)
    with SerialPool(game_specs(config, seeds.env_seeds), config.envs_per_worker) as pool:
        trainer = Trainer(config, pool, seeds, torch.device("cpu"))
        trainer.reset_envs()
        trainer.iteration()  # Adam has moments to alias from here on
        trainer.collect()
        start = trainer.snapshot()
        ends = []
        for _ in range(2):
            trainer.restore(start)
            trainer.optimize(trainer.schedule())
            ends.append(trainer.snapshot())
        trainer.restore(start)
        now = trainer.snapshot()
    for a, b in [(ends[0], ends[1]), (start, now)]:
        for name in a.model:
            assert torch.equal(a.model[name], b.model[name]), name
        for (i, moments), (j, others) in zip(a.optimizer["state"].items(), b.optimizer["state"].items(), strict=True):
            assert i == j and all(torch.equal(moments[k], others[k]) for k in moments), i
        assert a.shuffle == b.shuffle
    assert not torch.equal(start.model["value.weight"], ends[0].model["value.weight"])  # the update did move the critic


def test_collect_then_optimize_is_one_iteration_but_counts_no_update() -> None:
    # What tools/value_clip.py and the benchmark rely on: the two halves of `iteration`, run
    # apart, learn bit for bit what the whole does; only the whole counts the update (so a caller
    # that optimises one rollout several times does not anneal its settings between them).
    config = PPOConfig(n_workers=1, envs_per_worker=2, worker_steps=32, minibatches=2, epochs=1, seed=4)
    seeds = derive_seeds(config.seed, config.n_envs)
    learned = []
    for whole in (True, False):
        with SerialPool(game_specs(config, seeds.env_seeds), config.envs_per_worker) as pool:
            trainer = Trainer(config, pool, seeds, torch.device("cpu"))
            trainer.reset_envs()
            if whole:
                trainer.iteration()
            else:
                trainer.collect()
                trainer.optimize(trainer.schedule())
            learned.append(([p.detach().clone() for p in trainer.model.parameters()], trainer.update, trainer.env_steps))
    (whole_params, whole_update, whole_steps), (halves_params, halves_update, halves_steps) = learned
    assert all(torch.equal(p, q) for p, q in zip(whole_params, halves_params, strict=True))
    assert (whole_update, halves_update) == (1, 0) and whole_steps == halves_steps == 64
