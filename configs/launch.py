"""A launch's config, made in one merge and one validation: the defaults (or, on a resume, the run's
own saved config), then the command line, then this machine's grouping of the games.

A resume may change only the run options of its command line (`--device`, `--dashboard`, ...) and
the grouping of its games into worker processes; never what the run learns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from configs.fields import ConfigError
from configs.ppo import FIELDS, PPOConfig, validate

# How the games are spread over worker processes: a speed setting of the machine (grouped_for_cores)
# that a resume may change (--n-workers, --envs-per-worker) as long as the games stay the same: a
# run moved to a machine with other cores need not keep 8 processes on 2. Each game's state is
# saved on its own, so a resume in another grouping is exact whenever the network acts for the
# same games at once (ppo/rollout.py, acting_groups; tests/test_faults.py).
GROUPING = {"n_workers", "envs_per_worker"}


def launch_config(overrides: Mapping[str, Any], cores: int | None, saved: PPOConfig | None = None,
                  game_exists: Callable[[str], bool] | None = None,
                  reached: tuple[int, int] | None = None) -> tuple[PPOConfig, dict[str, str]]:
    """(the config to run, the fields this machine chose with why), `ConfigError` in one line otherwise.

    A new run layers the command line over the defaults, then groups its games by the `cores`
    unless the command line chose (`machine_groups`; `cores` None: not grouped, for the commands
    that only read a config). A resume (`saved`) layers it over the run's
    own config and keeps the run's grouping unless told; `--dashboard` is not taken from the
    checkpoint: a resume sends to the dashboard its own command line names, or to none. `reached`:
    the (update, agent steps) the resumed run's checkpoint is at, which its stop may not be below.
    """
    if saved is not None:
        check_resume_changes(saved, overrides)
        config = config_from_overrides({"dashboard": None, **regrouped(saved, overrides)}, saved, game_exists)
        # A stop below the steps already taken cannot be kept (the run would claim to have ended before
        # where it is); one at them ends the resume at once, as a member of a population reaching its target.
        if reached is not None and config.stop_after_env_steps is not None and config.stop_after_env_steps < reached[1]:
            raise ConfigError("stop_after_env_steps", config.stop_after_env_steps,
                              f"at least the run's own {reached[1]} agent steps (update {reached[0]} of "
                              f"{config.n_updates}), or none, to resume it")
        return config, {}
    defaults = PPOConfig.from_dict({**PPOConfig().to_dict(), **overrides})
    if cores is None or not machine_groups(defaults, overrides):
        return config_from_overrides(overrides, game_exists=game_exists), {}
    grouped = grouped_for_cores(defaults, cores)
    overrides = {**overrides, "n_workers": grouped.n_workers, "envs_per_worker": grouped.envs_per_worker}
    return config_from_overrides(overrides, game_exists=game_exists), {name: f"{cores} usable cores" for name in sorted(GROUPING)}


def config_from_overrides(overrides: Mapping[str, Any], base: PPOConfig | None = None,
                          game_exists: Callable[[str], bool] | None = None) -> PPOConfig:
    """The one merge of config layers: `overrides` over `base` (the defaults if None), validated."""
    return validate(PPOConfig.from_dict({**(base or PPOConfig()).to_dict(), **overrides}), game_exists)


def check_resume_changes(saved: PPOConfig, overrides: Mapping[str, Any]) -> None:
    """`ConfigError` for a command-line value a resume may not change (what the run learns)."""
    run_options = {f.name for f in FIELDS if f.metadata["run_option"]}
    for name, value in overrides.items():
        if name not in run_options | GROUPING and value != getattr(saved, name):
            raise ConfigError(name, value, f"the resumed run's own value {getattr(saved, name)!r} (only run options such as "
                                           "--device, and the grouping of its games, may change on --resume)")


def regrouped(saved: PPOConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`overrides` with the grouping completed: a resume keeps the run's number of games, so one of
    --n-workers and --envs-per-worker decides the other; `ConfigError` for a grouping of another number."""
    games = saved.n_envs
    chosen = {name: overrides[name] for name in sorted(GROUPING & overrides.keys())}
    if len(chosen) == 1:
        (name, value), = chosen.items()
        if games % value:
            raise ConfigError(name, value, f"a divisor of the resumed run's {games} games (a resume can regroup its games, "
                                           "not change their number)")
        other = (GROUPING - {name}).pop()
        return {**overrides, other: games // value}
    if len(chosen) == 2 and overrides["n_workers"] * overrides["envs_per_worker"] != games:
        raise ConfigError("n_workers", f"{overrides['n_workers']} with --envs-per-worker {overrides['envs_per_worker']}",
                          f"n_workers × envs_per_worker = the resumed run's {games} games (a resume can regroup its games, "
                          "not change their number)")
    return dict(overrides)


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
