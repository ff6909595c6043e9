"""The trainer itself refuses what would steer or break a run: live values outside their ranges, an
update stopped half-way (rolled back whole), and sampling state from another kind of device."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from configs.ppo import PPOConfig
from game.vector import PipePool, game_specs
from ppo.checkpoint import Checkpoint
from ppo.seeding import derive_seeds
from ppo.trainer import IterationSettings, Trainer, UpdateAbandoned
from tests.run_safety_support import H200_SAMPLING_STATE


@pytest.fixture
def trainer() -> Iterator[Trainer]:
    config = PPOConfig(n_workers=2, worker_steps=16, minibatches=2, epochs=2)
    seeds = derive_seeds(config.seed, config.n_envs)
    with PipePool(game_specs(config, seeds.env_seeds)) as pool:
        pool.reset()
        yield Trainer(config, pool, seeds, torch.device("cpu"))


# ---- live values: checked where they arrive, and by the trainer whatever reaches it ---------------

def test_a_live_value_outside_its_range_is_refused_before_the_rollout(trainer: Trainer) -> None:
    """A run checks each live value where it arrives (experiments/run/labml/live.py; through a real
    dashboard in tests/dashboard/test_hostile_dashboard.py): what reaches the trainer by another way
    is refused before anything runs: the model and the update count stay as they were."""
    sent = {"learning_rate": 1e-4, "clip_range": 0.2, "entropy_coef": 0.01, "value_coef": 0.5, "epochs": 3}
    trainer.live_values = lambda: dict(sent)
    assert (trainer.schedule().learning_rate, trainer.live_in_use) == (1e-4, sent)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    sent.update(learning_rate=-0.01)
    with pytest.raises(ValueError, match=r"learning_rate = -0.01: expected a value in \[0, 0.01\]"):
        trainer.iteration()
    assert trainer.update == 0 and all(torch.equal(p, q) for p, q in zip(trainer.model.parameters(), before, strict=True))


def test_settings_outside_the_ranges_never_touch_the_model(trainer: Trainer) -> None:
    trainer.collect()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    bad = IterationSettings(learning_rate=-0.01, clip_range=0.1, value_clip_range=0.1, value_coef=0.5, entropy_coef=0.01, epochs=2)
    with pytest.raises(ValueError, match=r"learning_rate = -0.01: expected a value in \[0, 0.01\]"):
        trainer.optimize(bad)
    assert all(torch.equal(p, q) for p, q in zip(trainer.model.parameters(), before, strict=True))


def test_a_stop_between_minibatches_rolls_the_update_back(trainer: Trainer) -> None:
    trainer.iteration()  # Adam has state: the rollback must restore it too
    trainer.collect()
    model_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    adam_before = {k: v.clone() for k, v in trainer.optimizer.state_dict()["state"][0].items()}
    shuffle_before = trainer.shuffle_rng.bit_generator.state  # a new dict each time it is read
    asked = []

    def stop_at_the_third_minibatch() -> bool:  # in epoch 2 of 2: half the update already applied
        asked.append(True)
        return len(asked) == 3

    trainer.should_stop = stop_at_the_third_minibatch
    with pytest.raises(UpdateAbandoned, match="stop requested during update 2"):
        trainer.optimize(trainer.schedule())
    assert len(asked) == 3 and trainer.update == 1
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor, model_before[name]), name
    for name, tensor in trainer.optimizer.state_dict()["state"][0].items():
        assert torch.equal(tensor, adam_before[name]), name
    assert trainer.shuffle_rng.bit_generator.state == shuffle_before  # the abandoned epochs drew no order


# ---- --device may change on a resume: a checkpoint moves between a CPU and a GPU --------------------

@pytest.mark.parametrize("recorded", [True, False], ids=["device recorded", "older checkpoint, told by size"])
def test_a_resume_on_another_device_seeds_sampling_from_the_run_seed_and_update(trainer: Trainer, recorded: bool) -> None:
    from ppo.seeding import resumed_sampling_seed
    state = trainer.state_dict({}).stored()
    state["update"] = 2265
    state["sample_generator"] = torch.tensor(H200_SAMPLING_STATE, dtype=torch.uint8)
    if recorded:
        state["sample_generator_device"] = "cuda"
    else:
        del state["sample_generator_device"]  # checkpoints before 2026-11-26 did not record it
    events: list[str] = []
    trainer.on_event = events.append
    trainer.load_state_dict(Checkpoint.from_stored(state))
    expected = torch.Generator().manual_seed(resumed_sampling_seed(trainer.torch_seed, 2265))
    assert torch.equal(trainer.sample_generator.get_state(), expected.get_state())
    assert len(events) == 1 and "update 2,265" in events[0]
    # On the device kind it was saved on, the state is restored as it was: the resume is exact.
    same = trainer.state_dict({})
    trainer.sample_generator.manual_seed(1)
    trainer.load_state_dict(same)
    assert torch.equal(trainer.sample_generator.get_state(), same.sample_generator) and len(events) == 1
