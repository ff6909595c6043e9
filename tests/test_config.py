"""Config validation, driven by hypothesis: any value either passes or is refused with one
clear message naming the option — never a traceback, never a silently broken run."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from configs.cli import build_parser, overrides_from_args
from configs.launch import config_from_overrides
from configs.ppo import FIELDS, LIVE_RANGES, ConfigError, PPOConfig, validate

BY_NAME = {f.name: f for f in FIELDS}
NUMERIC = [f.name for f in FIELDS if isinstance(f.default, (int, float)) and not isinstance(f.default, bool)]
texts = st.one_of(st.text(max_size=12), st.sampled_from(["nan", "inf", "-inf", "", " ", "1e309", "-0", "none", "1.5", "-3", "0"]),
                  st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr))


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(BY_NAME)), text=texts)
def test_any_text_for_any_option_is_accepted_or_refused_cleanly(name: str, text: str) -> None:
    args = argparse.Namespace(**{name: text})
    try:
        config = config_from_overrides(overrides_from_args(args))
    except ConfigError as e:
        # The option given is named: first, or inside a combination it broke (batch sizes).
        assert str(e).startswith(f"--{name.replace('_', '-')} ") or f"{name} " in str(e), str(e)
        assert "expected" in str(e) and "\n" not in str(e)
        return
    value = getattr(config, name)
    assert not (isinstance(value, float) and not math.isfinite(value))
    assert config.batch_size % config.minibatches == 0 and config.n_updates >= 1


@settings(max_examples=200, deadline=None)
@given(n_workers=st.integers(-2, 40), envs_per_worker=st.integers(-2, 8), worker_steps=st.integers(-2, 300),
       minibatches=st.integers(-2, 64))
def test_sizes_are_valid_exactly_when_the_batch_divides(n_workers: int, envs_per_worker: int, worker_steps: int,
                                                       minibatches: int) -> None:
    # serial: a local run is also held to this machine's cores (configs/machine.py), which is not what is tested here
    config = PPOConfig(n_workers=n_workers, envs_per_worker=envs_per_worker, worker_steps=worker_steps,
                       minibatches=minibatches, updates=1, backend="serial")
    valid = min(n_workers, envs_per_worker, worker_steps, minibatches) > 0 and \
        (n_workers * envs_per_worker * worker_steps) % minibatches == 0
    if valid:
        validated = validate(config)
        assert validated.minibatch_size * minibatches == validated.batch_size
    else:
        with pytest.raises(ConfigError):
            validate(config)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(LIVE_RANGES)), value=st.floats(-1e3, 1e3, allow_nan=False))
def test_live_hyperparameters_stay_in_their_declared_range(name: str, value: float) -> None:
    low, high = LIVE_RANGES[name]
    if isinstance(BY_NAME[name].default, int):
        value = round(value)
    config = PPOConfig(**{name: value})
    if low <= value <= high and value >= 0 and (name != "epochs" or value >= 1):
        assert getattr(validate(config), name) == value
    else:
        with pytest.raises(ConfigError, match=f"--{name.replace('_', '-')}"):
            validate(config)


def test_unknown_option_and_conflicts() -> None:
    with pytest.raises(ConfigError, match="unknown name 'learning_rat'"):
        PPOConfig.from_dict({"learning_rat": 1.0})
    with pytest.raises(ConfigError, match="either --updates or --total-env-steps"):
        overrides_from_args(argparse.Namespace(updates="3", total_env_steps="100"))


def test_every_field_is_documented_and_on_the_command_line() -> None:
    help_text = build_parser("x", "y").format_help()
    for name, f in BY_NAME.items():
        assert f.metadata["help"], f"{name} has no comment"
        assert f"--{name.replace('_', '-')}" in help_text
    assert set(NUMERIC) >= {"learning_rate", "n_workers", "gamma"}


def test_defaults_are_the_documented_ones() -> None:
    c = validate(PPOConfig())
    assert (c.n_workers, c.worker_steps, c.epochs, c.minibatches) == (8, 128, 4, 4)
    assert (c.gamma, c.gae_lambda, c.learning_rate, c.clip_range) == (0.99, 0.95, 2.5e-4, 0.1)
    assert (c.value_coef, c.entropy_coef, c.max_grad_norm, c.adam_eps) == (0.5, 0.01, 0.5, 1e-5)
    assert c.total_env_steps == 10_000_000 and c.game == "Breakout"
    assert (c.batch_size, c.minibatch_size, c.n_updates) == (1024, 256, 9765)
    assert c.schedule_env_steps == 10_000_000  # the budget asked for, not 9765 × 1024 = 9,999,360


def test_schedule_given_in_updates_spans_updates_times_batch() -> None:
    c = validate(PPOConfig(n_workers=2, envs_per_worker=1, worker_steps=16, minibatches=2, updates=5))
    assert (c.batch_size, c.n_updates, c.schedule_env_steps) == (32, 5, 160)  # 2 envs × 16 steps × 5


@pytest.mark.parametrize(("options", "policy_clip", "expected"), [
    ({}, 0.05, 0.5),  # the default: fixed at 0.5 whatever the policy's clip has annealed to
    ({"value_clip_range": None}, 0.05, 0.05),  # ppo2's rule: the policy's clip, annealed with it
    ({"value_clip_range": None}, 0.0, 0.0),  # ... down to 0 at the schedule's end
    ({"value_clip_range": 0.1}, 0.05, 0.1),  # CleanRL's fixed 0.1
    ({"clip_value_loss": False}, 0.05, None),  # no value clip at all
    ({"clip_value_loss": False, "value_clip_range": None}, 0.05, None),
])
def test_the_value_clip_of_an_update_follows_the_one_rule(options: dict[str, object], policy_clip: float,
                                                          expected: float | None) -> None:
    # The trainer's schedule and the benchmark's training step both take their value clip from here.
    assert validate(PPOConfig(**options)).value_clip_for(policy_clip) == expected  # type: ignore[arg-type]
