"""`python -m experiments.pbt`'s input checks and its perturbation of live values, without Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from configs.ppo import live_value_problem
from experiments.pbt import main
from experiments.pbt.explore import perturbed
from tests.pbt_support import TINY


@pytest.mark.parametrize(("values", "low", "high"), [
    ({"learning_rate": 1e-2, "clip_range": 1.0, "epochs": 32}, {"learning_rate": 0.008, "clip_range": 0.8, "epochs": 26},
     {"learning_rate": 1e-2, "clip_range": 1.0, "epochs": 32}),  # at the top of each range: × 1.2 stays there
    ({"learning_rate": 0.0, "clip_range": 0.05, "epochs": 1}, {"learning_rate": 0.0, "clip_range": 0.04, "epochs": 1},
     {"learning_rate": 0.0, "clip_range": 0.06, "epochs": 2}),  # an integer moves by at least 1, never below 1
])
def test_explore_stays_in_the_configs_ranges(values: dict[str, Any], low: dict[str, Any], high: dict[str, Any]) -> None:
    seen = [perturbed(values, list(values), np.random.default_rng(seed)) for seed in range(40)]
    for name in values:
        assert {s[name] for s in seen} == {low[name], high[name]}, name  # both factors drawn, each clipped
        assert all(live_value_problem(name, s[name]) is None for s in seen)


@pytest.mark.parametrize(("args", "message"), [
    (["--population", "1", "--interval", "2"], "--population 1: expected an integer from 2 to 1_024"),
    (["--population", "1025", "--interval", "2"], "--population 1025: expected an integer from 2 to 1_024"),
    (["--interval", "2"], "--population: expected an integer from 2 to 1_024, none given"),
    (["--population", "2"], "--interval: expected a number of updates, none given"),
    (["--population", "2", "--interval", "2", "--cpus-per-member", "nan"], "--cpus-per-member nan: expected a number > 0"),
    (["--population", "2", "--interval", "2", "--cpus-per-member", "0"], "--cpus-per-member 0: expected a number > 0"),
    (["--population", "2", "--interval", "2", "--max-retries", "-1"], "--max-retries -1: expected an integer from 0 to 100"),
    (["--population", "2", "--interval", "0"], "--interval 0: expected an integer from 1 to 1_000_000_000"),
    (["--population", "2", "--interval", "6"], "--interval 6: expected an integer from 1 to 5"),
    (["--population", "2", "--interval", "2", "--explore", "gamma"], "--explore gamma: expected distinct live"),
    (["--resume", "/nonexistent/pbt-x"], "--resume /nonexistent/pbt-x: expected a population folder (one holding population.json)"),
])
def test_bad_population_or_interval_is_one_line_before_ray_starts(args: list[str], message: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*args, *TINY, "--data-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_version_and_help_name_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--version", "--help"):
        with pytest.raises(SystemExit) as exit_:
            main([flag], prog="breakout-ppo pbt")
        assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("breakout-ppo ") and "usage: breakout-ppo pbt [-h]" in out and "--population N" in out


def test_a_resumed_population_keeps_its_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "population.json").write_text("{}")
    for extra, option in ((["--interval", "5"], "--interval"), (["--learning-rate", "1e-3"], "--learning-rate")):
        with pytest.raises(SystemExit) as exit_:
            main(["--resume", str(tmp_path), *extra])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [f"error: {option}: a resumed population keeps its own settings "
                                            "(only --ray-address may be given with --resume)"], err
