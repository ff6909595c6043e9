"""A resumed population's plan: the options population.json records are planned as `pbt` plans its
command line's before anything starts, and where this leg's members report and run is compared
with the first leg's.

The record says its fixed options are well formed (experiments/pbt/state.py); only planning them
says whether they can run here: a data dir that does not exist, cannot be written or is not the
members' would fail every member one by one instead of refusing in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from configs.launch import config_from_overrides
from configs.ppo import ConfigError
from configs.urls import strip_userinfo
from experiments.pbt.state import STATE, Population, PopulationFileError
from game.atari import is_known_game


def plan_resumed(given: str, population: Population, address: str | None) -> None:
    """The recorded population's options planned as `pbt`'s command line plans them, before anything
    starts (`PopulationFileError`, one line): population.json's fixed options are only known to be well formed, and a
    data dir that cannot be written (or is not the members') would fail every member instead."""
    from experiments.run.plan import check_can_start  # torch: once the options are accepted

    data_dir = population.fixed["data_dir"]
    where = f"--resume {given}: {STATE}'s fixed.data_dir is {json.dumps(data_dir, ensure_ascii=False)}"  # whole: a path cut is no help
    if not Path(data_dir).is_dir():
        raise PopulationFileError(f"{where}: expected an existing folder, the one that holds the members' runs")
    if population.generation > 0:  # every member has checkpointed by then: its run must be there
        for member, spec in enumerate(population.members):
            if population.run_dir(member) is None:
                raise PopulationFileError(f"{where}: expected the folder that holds the members' runs "
                                          f"(member {member}'s run {spec['run_uuid']} is not in it)")
    try:
        check_can_start(config_from_overrides(population.fixed, game_exists=is_known_game))
    except ConfigError as e:  # the device, the precision, a folder this user cannot write to
        raise PopulationFileError(f"--resume {given}: {STATE}'s fixed options: {e}") from None
    if address is not None and population.private_dashboard:
        raise PopulationFileError(f"--ray-address {address}: needs a population whose members report to a dashboard "
                                  "every node can reach; this one's is its own, on this machine (it was started "
                                  "without --dashboard)")


def this_leg(dashboard: str | None, address: str | None) -> dict[str, str | None]:
    """Where a leg's members report (None: the population's private dashboard) and run (None: a
    private Ray on this machine)."""
    return {"dashboard": dashboard, "ray_address": address}


def leg_changes(population: Population, address: str | None) -> list[str]:
    """One line for each of the dashboard and the Ray cluster that this leg changes from the first
    leg's (a record without the first leg's takes this one's)."""
    now = this_leg(None if population.private_dashboard else population.fixed["dashboard"], address)
    first, population.first_leg = population.first_leg, population.first_leg or now
    if first is None:
        return []
    dashboards = [strip_userinfo(d) if d else "a dashboard of its own on this machine" for d in (now["dashboard"], first["dashboard"])]
    clusters = [f"the Ray cluster at {a}" if a else "a Ray of its own on this machine" for a in (address, first["ray_address"])]
    lines = []
    if now["dashboard"] != first["dashboard"]:
        lines.append(f"note: the members report to {dashboards[0]} ({STATE}'s fixed.dashboard); "
                     f"the population's first leg's reported to {dashboards[1]}")
    if address != first["ray_address"]:
        lines.append(f"note: this leg runs on {clusters[0]} (--ray-address); the population's first leg ran on {clusters[1]}")
    return lines
