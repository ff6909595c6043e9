"""What a resume may change of its run's config: the run options of its command line (`--device`,
`--dashboard`, ...) and the grouping of its games into worker processes; never what the run learns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from configs.cli import config_from_overrides
from configs.fields import ConfigError
from configs.ppo import PPOConfig, config_fields

# How the games are spread over worker processes: a speed setting of the machine (configs/grouping.py,
# grouped_for_cores), that a resume may change (--n-workers, --envs-per-worker) as long as the
# games stay the same: a run moved to a machine with other cores need not keep 8 processes on 2. Each game's
# state is saved on its own, so a resume in another grouping is exact whenever the network acts for
# the same games at once (ppo/rollout.py, acting_groups; tests/test_faults.py).
GROUPING = {"n_workers", "envs_per_worker"}


def resumed_config(saved_values: dict[str, Any], overrides: dict[str, Any],
                   game_exists: Callable[[str], bool]) -> tuple[PPOConfig, PPOConfig]:
    """The run's own config, as its checkpoint saved it, and the one the resume goes on with: the
    saved one with the command line's run options and grouping (`ConfigError` for any other change).

    `--dashboard` is not taken from the checkpoint: a resume sends to the dashboard its own command
    line names, or to none, so a run never reports somewhere its launcher did not ask for.
    """
    saved = PPOConfig.from_dict(saved_values)
    run_options = {f.name for f in config_fields() if f.metadata["run_option"]}
    for name, value in overrides.items():
        if name not in run_options | GROUPING and value != getattr(saved, name):
            raise ConfigError(name, value, f"the resumed run's own value {getattr(saved, name)!r} (only run options such as "
                                           "--device, and the grouping of its games, may change on --resume)")
    return saved, config_from_overrides({"dashboard": None, **regrouped(saved, overrides)}, saved, game_exists)


def regrouped(saved: PPOConfig, overrides: dict[str, Any]) -> dict[str, Any]:
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
    return overrides
