"""ppo/resume_point.py's `with_learner_of`: what population-based training's exploit copies from a
better run (the learner: weights, Adam, schedule position) and what it leaves a run's own (games,
seeds, random streams, live values). Real models and real Adam steps, through a real file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from configs.ppo import PPOConfig
from ppo.checkpoint import Checkpoint, CheckpointError, read_checkpoint, save_checkpoint
from ppo.model import ActorCritic
from ppo.resume_point import LEARNER_FIELDS, check_fits, frozen, read_resume_point, thawed, with_learner_of


def trained(seed: int, steps: int, update: int, n_actions: int = 4, frame_stack: int = 4) -> Checkpoint:
    """A checkpoint of a model that took `steps` Adam steps from its own seed, its own games and streams."""
    torch.manual_seed(seed)
    model = ActorCritic(n_actions, frame_stack)
    adam = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    frames = torch.randint(0, 256, (2, frame_stack, 84, 84), dtype=torch.uint8)
    for _ in range(steps):
        logits, values = model(frames)
        (logits.square().mean() + values.square().mean()).backward()
        adam.step()
        adam.zero_grad()
    generator = torch.Generator().manual_seed(seed)
    config = {**PPOConfig().to_dict(), "seed": seed, "frame_stack": frame_stack}
    return Checkpoint(config=config, model=model.state_dict(), optimizer=adam.state_dict(), n_actions=n_actions,
                      update=update, env_steps=update * 1024, games=seed, scores=[float(seed)] * seed,
                      lengths=[100 * seed] * seed, live_values={"learning_rate": 1e-4 * seed, "epochs": seed},
                      sample_generator=generator.get_state(), sample_generator_device="cpu",
                      shuffle_rng=np.random.default_rng(seed).bit_generator.state,
                      env_states=[{"seed": seed, "state": bytes([seed]) * 8}], worker_restarts=seed, nonfinite_skipped=seed)


def test_the_copy_takes_the_donors_learner_and_keeps_the_runs_own_games_and_streams(tmp_path: Path) -> None:
    own, donor = trained(seed=1, steps=2, update=3), trained(seed=2, steps=5, update=7)
    save_checkpoint(tmp_path / "copy.pt", with_learner_of(own, donor))
    copy = read_checkpoint(tmp_path / "copy.pt")  # through a file, as a resume reads it
    assert LEARNER_FIELDS == ("model", "optimizer", "update", "env_steps")
    assert all(torch.equal(copy.model[k], donor.model[k]) for k in donor.model)
    assert not all(torch.equal(copy.model[k], own.model[k]) for k in own.model)
    state = copy.optimizer["state"][0]
    assert int(state["step"]) == 5 and torch.equal(state["exp_avg"], donor.optimizer["state"][0]["exp_avg"])
    assert (copy.update, copy.env_steps) == (7, 7 * 1024)  # the donor's schedule position
    # Everything else is the run's own: its games, their records, its seed, streams, live values.
    assert (copy.games, copy.scores, copy.lengths) == (1, [1.0], [100])
    assert copy.env_states == [{"seed": 1, "state": b"\x01" * 8}]
    assert copy.config["seed"] == 1 and copy.live_values == {"learning_rate": 1e-4, "epochs": 1}
    assert torch.equal(copy.sample_generator, own.sample_generator)
    assert copy.shuffle_rng == own.shuffle_rng
    assert (copy.worker_restarts, copy.nonfinite_skipped) == (1, 1)
    # Neither argument changed.
    assert (own.update, donor.games) == (3, 2) and int(own.optimizer["state"][0]["step"]) == 2


@pytest.mark.parametrize(("n_actions", "frame_stack", "message"), [
    (6, 4, "the checkpoint's model has 6 actions; the checkpoint it is copied into has 4"),
    (4, 2, "the checkpoint's model stacks 2 frames; this config stacks 4"),
])
def test_a_donor_of_another_shape_is_refused(n_actions: int, frame_stack: int, message: str) -> None:
    own = trained(seed=1, steps=1, update=1)
    with pytest.raises(CheckpointError) as refused:
        with_learner_of(own, trained(seed=2, steps=1, update=1, n_actions=n_actions, frame_stack=frame_stack))
    assert str(refused.value) == message


def test_a_resume_point_is_read_only_and_what_a_trainer_steps_is_its_own(tmp_path: Path) -> None:
    """The resume point a plan holds cannot be changed by a consumer that forgot to copy: its dicts
    refuse changes, its lists are tuples, and torch refuses an in-place op on its tensors (Adam's
    moments loaded as they are fail at the first step). What the trainer steps is `thawed`, and the
    point stays as read."""
    save_checkpoint(tmp_path / "c.pt", dataclasses.replace(trained(seed=1, steps=2, update=3), env_states=None))
    checkpoint = read_resume_point([tmp_path / "c.pt"]).checkpoint
    with pytest.raises(TypeError, match="read-only"):
        checkpoint.live_values["epochs"] = 9
    with pytest.raises(TypeError, match="read-only"):
        checkpoint.optimizer["state"].clear()
    with pytest.raises(AttributeError):
        checkpoint.scores.append(1.0)  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"[Ii]nference"):
        checkpoint.model["policy.bias"].add_(1.0)
    model = ActorCritic(4, 4)
    check_fits(checkpoint, 4, 4, into=model)
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)

    def step(adam: torch.optim.Adam) -> None:
        logits, values = model(frames)
        (logits.square().mean() + values.square().mean()).backward()
        adam.step()
        adam.zero_grad()
    forgot = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    forgot.load_state_dict(checkpoint.optimizer)  # torch keeps the given tensors, and would step them in place
    with pytest.raises(RuntimeError, match=r"[Ii]nference"):
        step(forgot)
    read = {k: v["exp_avg"].clone() for k, v in checkpoint.optimizer["state"].items()}
    adam = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    adam.load_state_dict(thawed(checkpoint.optimizer))
    step(adam)
    assert all(torch.equal(checkpoint.optimizer["state"][k]["exp_avg"], v) for k, v in read.items())
    assert not all(torch.equal(adam.state_dict()["state"][k]["exp_avg"], v) for k, v in read.items())
    # Still read as plain data where it is only read: JSON, numpy's generator state.
    assert json.loads(json.dumps(checkpoint.live_values)) == {"learning_rate": 1e-4, "epochs": 1}
    np.random.default_rng().bit_generator.state = checkpoint.shuffle_rng


def test_a_resume_points_read_only_dict_is_refused_as_a_checkpoint_is_saved_not_as_it_is_read(tmp_path: Path) -> None:
    """A record taken from a resume point without `thawed` would be written as an object of our
    class, which weights-only loading refuses: the run's next resume would find no checkpoint."""
    state = dataclasses.replace(trained(seed=1, steps=1, update=1), machines=[frozen({"cpu": "x"})])
    with pytest.raises(TypeError, match="ReadOnlyDict"):
        save_checkpoint(tmp_path / "c.pt", state)
    assert not (tmp_path / "c.pt").exists()
    save_checkpoint(tmp_path / "c.pt", dataclasses.replace(state, machines=thawed(state.machines)))
    assert read_checkpoint(tmp_path / "c.pt").machines == [{"cpu": "x"}]
