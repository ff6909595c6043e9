"""`python -m experiments.pbt --population N --interval UPDATES [training options …]`.

Every training option (`python -m experiments.breakout --help`) is shared by the members; member i
trains with seed --seed + i. The last line printed on stdout is the path of the population's
lineage.csv; everything else goes to stderr. Exit codes: 0 every member reached its last update;
1 a member failed and could not be replaced, the Ray cluster could not be joined, or its head was
lost; 2 bad input, refused before anything is written (a cluster none of whose nodes has
--cpus-per-member CPUs included), or a member's node cannot see --data-dir (docs/ray.md; the
others stopped at a checkpoint); 130 stopped by Ctrl-C/SIGTERM (every member with a checkpoint:
`--resume FOLDER` goes on; a stop before any member ran says whether the population was saved).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from configs.cli import OneLineParser, build_parser, float_in, int_in, overrides_from_args, spell_game
from configs.fields import MAX_UPDATES
from configs.launch import config_from_overrides
from configs.ppo import ConfigError
from configs.refusals import error_line, fail
from configs.urls import strip_userinfo
from dashboard.client import DashboardError, compare_line, set_hyperparams
from experiments.pbt.explore import DEFAULT_EXPLORED, changes_text, check_explored, exploit
from experiments.pbt.legs import leg_changes, plan_resumed, this_leg
from experiments.pbt.lineage import COLUMNS, append_rows, plot, read_rows
from experiments.pbt.population import PrivateDashboard, run_segment
from experiments.pbt.state import (
    MAX_CPUS,
    MAX_POPULATION,
    STATE,
    Population,
    PopulationFileError,
    check_population_folder,
)
from experiments.ray_tasks import Ending, connection_for
from experiments.run.console import say  # it may quote a dashboard, a member's error: escaped, on stderr
from experiments.run.folders import RunFolder
from experiments.run.safe_files import UnsafeRunFolder
from experiments.run.stopping import signals_stop_as_ctrl_c
from experiments.shared_data_dir import DataDirMark
from game.atari import canonical_game, is_known_game
from ray_setup.connection import RayConnection, connection_refusal
from ray_setup.errors import first_line
from ray_setup.installed import ray_refusal

PROG = "python -m experiments.pbt"
TWEAK = "python -m experiments.tweak"


class PbtError(ValueError):
    """Bad input: one line, exit 2, before anything starts."""


def plan(args: argparse.Namespace) -> tuple[Population, str | None]:
    """The population to run (new, or read from --resume) and the Ray cluster's address, every
    value checked before Ray or any member starts."""
    overrides = overrides_from_args(args)
    address = overrides.pop("ray_address", None)  # the population's cluster, not a member setting
    if address is not None:
        config_from_overrides({"backend": "ray", "ray_address": address})  # its syntax
    if args.resume is not None:
        return plan_resume(args, overrides, address), address
    if args.population is None:  # its range, and the interval's, are checked as they are parsed (int_in)
        raise PbtError(f"--population: expected an integer from 2 to {MAX_POPULATION:_}, none given")
    if args.interval is None:
        raise PbtError("--interval: expected a number of updates, none given")
    explore = args.explore.split(",") if args.explore is not None else list(DEFAULT_EXPLORED)
    if (problem := check_explored(explore)) is not None:
        raise PbtError(f"--explore {args.explore}: expected {problem}")
    fixed = spell_game(overrides, canonical_game)
    base = config_from_overrides(fixed, game_exists=is_known_game)
    if args.interval >= base.last_update:
        raise PbtError(f"--interval {args.interval}: expected an integer from 1 to {base.last_update - 1} (fewer "
                       f"than the members' {base.last_update} updates, or no member would ever copy another)")
    if address is not None and base.dashboard is None:
        raise PbtError(f"--ray-address {address}: needs --dashboard URL, one every node can reach (the members' live channel)")
    from experiments.run.plan import check_can_start  # torch: once the options are accepted, not for --help

    check_can_start(base)
    cpus = args.cpus_per_member if args.cpus_per_member is not None else (1 if base.backend == "serial" else base.n_workers + 1)
    if not 0 < cpus <= MAX_CPUS:
        raise PbtError(f"--cpus-per-member {cpus:g}: expected a number > 0 and ≤ {MAX_CPUS}")
    fixed = {"torch_threads": max(1, int(cpus)), **fixed, "data_dir": str(Path(base.data_dir).resolve())}
    fixed.pop("seed", None)
    folder = Path(fixed["data_dir"]) / base.name / f"pbt-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    members = [{"run_uuid": uuid.uuid4().hex, "seed": base.seed + i} for i in range(args.population)]
    return Population(str(folder), args.interval, explore, base.last_update, base.batch_size, fixed, members, cpus,
                      args.max_retries, private_dashboard=base.dashboard is None,
                      first_leg=this_leg(base.dashboard, address)), address


def plan_resume(args: argparse.Namespace, overrides: dict[str, Any], address: str | None) -> Population:
    """The population of `--resume FOLDER`, read, checked and planned; the lines on what this leg
    changes from the first are said once it is accepted."""
    if not os.path.lexists(Path(args.resume) / STATE):
        raise PbtError(f"--resume {args.resume}: expected a population folder (one holding {STATE})")
    given = sorted(overrides) + [o for o in ("population", "interval", "explore") if getattr(args, o) is not None]
    if given:
        raise PbtError(f"--{given[0].replace('_', '-')}: a resumed population keeps its own settings "
                       "(only --ray-address may be given with --resume)")
    population = resumed(args.resume)
    plan_resumed(args.resume, population, address)
    for line in leg_changes(population, address):
        say(line)
    return population


def resumed(given: str) -> Population:
    """The population recorded in folder `given`, refused in one line before a byte is written
    (`PbtError`) where its folder or a member's run folder holds a symbolic link, a device, FIFO
    or socket, or a file with a second hard link (`check_population_folder`, `RunFolder.check`), or where a
    field of its population.json is missing or wrong (experiments/pbt/state.py)."""
    folder = Path(given)
    try:
        check_population_folder(folder)
    except UnsafeRunFolder as e:
        raise PbtError(f"--resume {given}: expected a population folder of plain files and folders ({e}; "
                       "nothing was read or written)") from None
    try:
        population = Population.load(folder)
    except PopulationFileError as e:
        raise PbtError(f"--resume {given}: {e}") from None
    for member in range(len(population.members)):
        if (run_dir := population.run_dir(member)) is not None:
            try:
                RunFolder.at(run_dir).check()  # each member's resume checks it again, as it starts
            except UnsafeRunFolder as e:
                raise PbtError(f"--resume {given}: expected member {member}'s run folder of plain files and "
                               f"folders ({e}; nothing was read or written)") from None
    return population


def exploit_and_explore(population: Population, update: int, failures: dict[int, str | None]) -> list[dict[str, Any]]:
    """The bottom quarter (and any member that failed) copies a top-quarter member's learner and is
    sent that member's live values, perturbed, through the dashboard; one lineage row each."""
    n = len(population.members)
    scores = {m: population.summary(m).get("score_mean_100") for m in range(n)}
    order = sorted(range(n), key=lambda m: (failures.get(m) is not None, scores[m] is None, -(scores[m] or 0.0), m))
    quarter = max(1, n // 4)
    top = order[:quarter]
    losers = sorted((set(order[-quarter:]) | {m for m, why in failures.items() if why}) - set(top))
    rows = []
    for i, member in enumerate(losers):
        donor = top[i % quarter]
        run_dir, donor_dir = population.run_dir(member), population.run_dir(donor)
        if run_dir is None or donor_dir is None or not RunFolder.at(run_dir).newest_checkpoint.exists():
            raise RuntimeError(f"member {member} has no checkpoint to copy member {donor}'s learner into "
                               f"({failures.get(member) or 'no run folder'})")
        changes = exploit(run_dir, donor_dir, population.explore, np.random.default_rng([population.members[member]["seed"], update]))
        population.unqueued[str(member)] = changes  # queued on the dashboard once its next segment runs
        say(f"  member {member} ({_score(scores[member])}) takes member {donor}'s weights, Adam state and schedule "
            f"position ({_score(scores[donor])}) at update {update}, keeps its own games and seeds; "
            f"its live values become {changes_text(changes)}")
        rows.append({"update": update, "member": member, "copied_from": donor, "changes": changes_text(changes),
                     "node_id": population.summary(member).get("node_id"), "donor_node_id": population.summary(donor).get("node_id")})
    return rows


def queue_on_dashboard(population: Population, member: int, changes: dict[str, Any]) -> bool:
    """Queue `changes` for the member as `experiments.tweak` does, for its next leg: the dashboard
    hands them out with the answer to that leg's first message, so they are delivered however short
    the segment. False while the dashboard refuses (409), True once taken, or given up on (said)."""
    try:
        set_hyperparams(population.fixed["dashboard"].split("/api/")[0], population.members[member]["run_uuid"], changes,
                        next_leg=True)
    except DashboardError as e:
        if e.status == 409:
            return False
        say(f"  warning: member {member}'s values {changes_text(changes)} could not be queued on the dashboard ({e}); "
            "they are in use all the same (its checkpoint holds them)")
        return True
    say(f"  member {member}: {changes_text(changes)} queued on the dashboard for its next segment (its checkpoint holds them already)")
    return True


def tweak_hint(population: Population) -> str:
    """How a person tweaks a member by hand: the command, with the dashboard the members report to."""
    dashboard = strip_userinfo(population.fixed["dashboard"].split("/api/")[0])
    while_running = " (while the population runs: its dashboard ends with it)" if population.private_dashboard else ""
    return f"tweak a member by hand{while_running}: {TWEAK} --dashboard {dashboard} RUN_UUID NAME=VALUE"


def _score(score: float | None) -> str:
    return "no game ended yet" if score is None else f"score {score:.1f}"


def run(population: Population, address: str | None) -> int:
    """Run (or go on with) the population; its exit code (see the module's doc)."""
    mark = DataDirMark(population.fixed["data_dir"])
    connection = connection_for(address, population.cpus_per_member, mark.env)
    code: int | None = None
    began = False  # _run: the population's folder made, its members about to run
    try:
        with contextlib.ExitStack() as on_cluster:
            # A cluster is joined before anything is written: one with no node that can take a member
            # is refused with nothing made (no folder, no dashboard), as a bad option is.
            if address is not None:
                try:
                    on_cluster.enter_context(connection)
                except ConnectionError as e:  # no cluster there, or one that refuses this driver (its auth token)
                    raise RuntimeError(f"--ray-address {address}: could not join a Ray cluster there "
                                       f"({first_line(e)}); no member ran") from None
                if not connection.fits(population.cpus_per_member):
                    say(error_line(f"--cpus-per-member {population.cpus_per_member:g}: expected at most the CPUs of one "
                                   f"node of the cluster at {address}"))
                    code = 2
            if code is None:
                began = True
                code = _run(population, connection, mark)
    except KeyboardInterrupt:  # while the cluster was joined, or as it was left (the population's ending stands)
        if code is None:
            say("pbt stopped before any member ran" if began else "pbt stopped while joining the cluster: nothing was started or written")
            code = 130
    except (OSError, UnsafeRunFolder, RuntimeError) as e:  # before any member ran: its folder, its dashboard, Ray
        say(error_line(str(e)))
        code = 1
    return code


def _run(population: Population, connection: RayConnection, mark: DataDirMark) -> int:
    folder = population.path
    folder.mkdir(parents=True, exist_ok=True)
    lineage = folder / "lineage.csv"
    append_rows(lineage, [])  # the header, so the path printed always names a table
    targets = population.targets()
    private = PrivateDashboard(folder / "dashboard", Path(population.fixed["data_dir"])) if population.private_dashboard else None
    code, submitted = 130, False  # 130 unless run_generations says otherwise; submitted: members may have run
    try:
        with private or contextlib.nullcontext():
            if private is not None:
                population.fixed["dashboard"] = private.url
            population.save()
            say(f"pbt: {len(population.members)} members, {len(targets)} segments of {population.interval} updates "
                f"(to update {population.last_update}); exploring {', '.join(population.explore)}; folder {folder}\n"
                f"  dashboard {strip_userinfo(population.fixed['dashboard'])}; members: "
                + ", ".join(f"{i}: {m['run_uuid']} (seed {m['seed']})" for i, m in enumerate(population.members))
                + f"\n  {tweak_hint(population)}")
            say_comparison(population)
            try:
                # A private Ray (sized for a member) starts here; the data folder's mark is written
                # before any member is submitted, and removed at the end.
                with contextlib.nullcontext() if connection.connected else connection, mark:
                    submitted = True
                    code = run_generations(population, connection, targets, lineage)
            except (RuntimeError, OSError, UnsafeRunFolder) as e:  # a write refused: a link put in the folder meanwhile
                say(error_line(str(e)))
                code = 1
    except KeyboardInterrupt:  # a person's stop: between segments, or while Ray or the dashboard started or stopped
        pass  # one as they stopped leaves the population's ending as it was
    if code == 130 and submitted:
        say(f"pbt stopped: every member was asked to stop and checkpoint; go on with: {PROG} --resume {folder}")
    elif code == 130:
        say(f"pbt stopped before any member ran; go on with: {PROG} --resume {folder}" if (folder / STATE).exists()
            else f"pbt stopped before any member ran; nothing was saved ({folder} holds no {STATE})")
    if not population.private_dashboard and population.generation > 0:  # a private one has stopped with it
        say_comparison(population)
    print(lineage, flush=True)
    return code


def run_generations(population: Population, connection: RayConnection, targets: list[int], lineage: Path) -> int:
    """Every generation left: its segment, then (but after the last) its exploits; the exit code."""
    folder = population.path
    failures: dict[int, str | None] = {}
    while population.generation < len(targets):
        target = targets[population.generation]
        say(f"segment {population.generation + 1}/{len(targets)}: every member to update {target}")
        scheduled, failures = run_segment(connection, population, target, lambda m, c: queue_on_dashboard(population, m, c), say)
        if scheduled.ending is Ending.STOPPED:
            return 130
        if scheduled.ending is Ending.HEAD_LOST:  # nothing of this generation is recorded
            say(f"pbt: the Ray cluster at {connection.address} was lost (its head); every member's last checkpoint is kept; "
                f"go on with: {PROG} --resume {folder} --ray-address {connection.address}")
            return 1
        if scheduled.ending is Ending.DATA_DIR_REFUSED:  # the others stopped at a checkpoint
            say(error_line(scheduled.refusal or ""))
            return 2
        last = population.generation == len(targets) - 1
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:  # a generation's copies, its rows and its count are done whole, or not at all
            rows = [] if last else exploit_and_explore(population, target, failures)
            append_rows(lineage, rows)
            population.generation += 1
            population.save()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        plot(folder / "lineage.png", read_rows(lineage), [population.run_dir(m) or folder for m in range(len(population.members))])
    for member, changes in population.unqueued.items():
        say(f"  note: member {member}'s run ended before the dashboard saw it running: {changes_text(changes)} "
            "was never queued there (its checkpoint holds them; updates.csv shows them)")
    return 0 if not any(failures.values()) else 1


def say_comparison(population: Population) -> None:
    """The members' comparison page on the dashboard (a member shows there once its first segment starts)."""
    say("  " + compare_line(population.fixed["dashboard"], [m["run_uuid"] for m in population.members], "members"))


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser: OneLineParser = build_parser(prog, "Population-based training: members train in parallel on Ray; every "
                                               "--interval updates the worst quarter copies the best quarter's learner and "
                                               "is sent its live hyperparameters, perturbed, through the dashboard's live "
                                               "channel. The training options below are every member's.")
    group = parser.add_argument_group("population")
    group.add_argument("--population", type=int_in(2, MAX_POPULATION), metavar="N", help=f"members, 2 to {MAX_POPULATION:_}")
    group.add_argument("--interval", type=int_in(1, MAX_UPDATES), metavar="UPDATES", help="updates between exploits")
    group.add_argument("--explore", metavar="NAME,…", help=f"live hyperparameters to perturb (default: {','.join(DEFAULT_EXPLORED)})")
    group.add_argument("--cpus-per-member", type=float_in(0, 1024, low_open=True), metavar="C",
                       help="CPUs Ray reserves for each member (default: its workers + 1; 1 with --backend serial)")
    group.add_argument("--max-retries", type=int_in(0, 100), default=1, metavar="N",
                       help="run a member's segment again, from its checkpoint, when its process dies, 0 to 100 (default: 1)")
    group.add_argument("--resume", metavar="FOLDER", help="go on with a stopped population (its folder)")
    args = parser.parse_args(argv)
    if (refusal := ray_refusal("populations")) is not None:
        fail(refusal)
    try:
        population, address = plan(args)
    except (ConfigError, PbtError, PopulationFileError) as e:
        fail(str(e))
    if (refusal := connection_refusal(address)) is not None:
        fail(refusal)  # a cluster this driver cannot join, or a Ray it cannot use, said before anything starts

    signals_stop_as_ctrl_c()  # SIGINT and SIGTERM; the connection keeps SIGTERM's through ray.init
    return run(population, address)


__all__ = ["COLUMNS", "main"]
