"""Hyperparameter sweeps on Ray: `python -m experiments.sweep --help`.

A grid (`--grid learning_rate=1e-4,2.5e-4`) and/or random search (`--random
entropy_coef=loguniform:1e-3:1e-1 --samples 8`), from the command line or a YAML file
(`--config sweep.yaml`). Every trial is a full labml run (`experiments.run.lifecycle.TrainingRun`, with
`--dashboard URL` passed through, so each trial shows in the dashboard) executed as one Ray task
reserving `--cpus-per-trial` CPUs, so trials spread over the cluster's nodes. Each trial runs its
own `--workers-per-trial` env workers (local processes next to its trainer, or Ray actors with
`--backend ray`).

A trial whose node or worker process is lost is run again by Ray (`--max-retries`) under the same
run uuid: with `--data-dir` on storage every node sees, it resumes from its last checkpoint. A lost
head ends the sweep (exit 1) with its CSV written and one line naming the command to go on: the
same options and `--resume CSV` (experiments/sweep_resume.py).

At the end: a table of trials sorted by their final full-game score (`score_mean_100`), also
written as CSV (`--csv`, default `<data_dir>/<name>/sweep-<time>.csv`), whose path is the last
line printed; with `--dashboard`, the line before it is the address of the trials' comparison page. Exit code 0 when every trial completed, 1 otherwise,
and 2 when a trial's node cannot see `--data-dir` (experiments/shared_data_dir.py): one line on
stderr, the other trials stopped at a checkpoint, the CSV written with what finished.
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import math
import os
import signal
import sys
import time
import typing
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from configs.cli import OneLineParser, build_parser, float_in, int_in, overrides_from_args, spell_game
from configs.fields import MAX_SEED, MAX_WORKERS
from configs.files import atomic_write
from configs.launch import config_from_overrides
from configs.machine import shared_cores_environment
from configs.ppo import ConfigError, PPOConfig
from configs.refusals import error_line, fail
from configs.terminal import escaped
from experiments.ray_tasks import run_task, stop_gently
from experiments.run.stopping import signals_stop_as_ctrl_c
from experiments.shared_data_dir import DataDirMark, DataDirNotShared, check_data_dir_seen, refusal_in
from experiments.sweep_resume import argv_of, go_on_command, lost_line, resumed_rows
from experiments.sweep_space import MAX_TRIALS, SearchSpace, SweepError, search_space
from game.atari import canonical_game, is_known_game
from game.vector.private_ray import cluster_refusal, join_ray_cluster, ray_refusal, start_private_ray, stop_ray
from game.vector.ray_cluster import head_lost, lost_now, watch_head

PROG = "python -m experiments.sweep"
REPO = Path(__file__).resolve().parents[1]
SCORE = "score_mean_100"


# ---- one trial (runs in a Ray worker process) ---------------------------------------------------

def run_trial(overrides: dict[str, Any], run_uuid: str, label: str | None = None) -> dict[str, Any]:
    """A full labml run with `overrides`, as the `uuid` run, named on the dashboard by `label`
    (its sweep and trial, or its population and member); resumes it if a checkpoint exists (Ray
    re-ran this trial after its node or process was lost), and starts it afresh in its own folder
    otherwise (experiments/run/plan.py). Returns the run's summary."""
    check_data_dir_seen(overrides["data_dir"])  # before anything is written: a node that cannot see it refuses
    from experiments.run.lifecycle import TrainingRun
    from experiments.run.plan import plan_launch

    plan = plan_launch(overrides, run_uuid=run_uuid, label=label)
    result = TrainingRun(plan).run()
    return {**result.summary, "exit_code": result.exit_code, "host": os.uname().nodename, "resumed": plan.resume is not None}


# ---- the driver -----------------------------------------------------------------------------------

def connect(address: str | None, cpus_per_trial: float, env: dict[str, str] | None = None) -> bool:
    """ray.init: a cluster at `address`, or a private local instance (loopback only, a token of its
    own: game/vector/private_ray.py) with room for ≥ 1 trial, every task with `env` in its
    environment. Returns whether a trial fits on some node (False: no node has cpus_per_trial CPUs).

    ray.init puts its own SIGTERM handler in the driver, one that aborts it (exit -6): the work
    would not be stopped nor a private Ray shut down. The driver's own handler is put back."""
    own_sigterm = signal.getsignal(signal.SIGTERM)
    common: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    # Trials (or members) share a node's cores: their idle torch threads sleep rather than spin
    # (configs/machine.py). A private Ray's workers inherit this process's environment.
    shared = {**shared_cores_environment(), **(env or {})}
    try:
        if address is None:
            os.environ.update(shared)
            start_private_ray(max(os.cpu_count() or 1, math.ceil(cpus_per_trial)), **common)
            return True
        # The cluster's nodes need the same Python environment; this checkout's code travels with the
        # job (working_dir), so every trial runs the driver's version of it.
        excludes = [".git", ".venv", "venv", "runs", "docs", "tests", "**/__pycache__", "*.egg-info"]
        # Ray's own default list (the first four of ours) comes with a warning for each of them found
        # in the folder, on the user's terminal; Ray's public switch turns its list off, ours stays.
        os.environ.setdefault("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", "")
        ray = join_ray_cluster(address, runtime_env={"working_dir": str(REPO), "excludes": excludes, "env_vars": shared}, **common)
        watch_head(address)  # a lost head: a Ctrl-C here, then one line of ours (the callers' KeyboardInterrupt)
        return any(n["Alive"] and n["Resources"].get("CPU", 0) >= cpus_per_trial for n in ray.nodes())
    finally:
        if own_sigterm is not None:  # None: a handler not set from Python, nothing to put back
            signal.signal(signal.SIGTERM, own_sigterm)


def run_sweep(trials: list[dict[str, Any]], fixed: dict[str, Any], cpus_per_trial: float, max_retries: int,
              max_concurrent: int | None, log: typing.Callable[[str], None], name: str,
              rows: list[dict[str, Any]] | None = None, kept: typing.AbstractSet[int] = frozenset()) -> list[dict[str, Any]]:
    """Run every trial as a Ray task, but those in `kept` (completed in a resumed sweep); returns one
    row per trial (its parameters and summary), filled in `rows` when given. The dashboard lists
    each run as `name` (the results table's) and its trial number."""
    import ray

    task = run_task(ray, run_trial, cpus_per_trial, max_retries)
    rows = planned_rows(trials) if rows is None else rows
    queue = [i for i in range(len(trials)) if i not in kept]
    running: dict[Any, int] = {}
    limit = max_concurrent or len(trials)
    started = time.perf_counter()
    try:
        while queue or running:
            while queue and len(running) < limit:
                i = queue.pop(0)
                running[task.remote({**fixed, **trials[i]}, rows[i]["run_uuid"], f"{name} trial {i + 1}")] = i
            done, _ = ray.wait(list(running), num_returns=1)
            i = running.pop(done[0])
            if (refusal := _record(ray, rows[i], done[0])) is not None:  # its node cannot see --data-dir: nor will others
                stop_gently(ray, list(running))
                for ref, j in running.items():  # one stopped before its run began reports whatever Ray says: named here
                    if _record(ray, rows[j], ref) is None and rows[j]["status"] == "failed":
                        rows[j].update(status="stopped", error=f"stopped: trial {i + 1}'s node cannot see --data-dir")
                running.clear()
                raise DataDirNotShared(refusal)
            finished = len(trials) - len(queue) - len(running)  # those kept from a resumed sweep included
            score = rows[i]["score"]
            log(f"[{finished}/{len(trials)} after {time.perf_counter() - started:.0f} s] trial {i + 1} {rows[i]['status']}: "
                f"{SCORE} {'-' if score is None else f'{score:.1f}'}  {_params(trials[i])}  run {rows[i]['run_uuid']}"
                + (f"  ({rows[i]['error']})" if rows[i].get("error") else ""))
    finally:
        # Ctrl-C or an error here: stop what still runs (checkpoints stay). Not once the head is
        # lost: its trials went with it, and a cancel may wait on the dead GCS until Ray's client
        # ends this process a minute later, before the line of ours that says how to go on.
        for ref in running if not head_lost() else ():
            ray.cancel(ref, force=True)
    return rows


def stop_if_lost_with_the_head(rows: list[dict[str, Any]], address: str | None) -> None:
    """The sweep ended as a lost head ends it (KeyboardInterrupt, `head_lost()` true) when its failed
    trials' workers went with the head and Ray said so before the head's watcher looked: those
    trials were lost, not failed, and go on with --resume like the others."""
    if any(r.get("status") == "failed" for r in rows) and lost_now(address):
        for row in rows:
            if row.get("status") == "failed":
                row["status"] = "lost"
        raise KeyboardInterrupt


def _record(ray: Any, row: dict[str, Any], ref: Any) -> str | None:
    """The trial's summary in its row; returns the refusal of a node that cannot see --data-dir."""
    try:
        summary = ray.get(ref)
        row.update(status=summary["status"], error=summary.get("error"), score=summary.get(SCORE), games=summary.get("games"),
                   updates=summary.get("updates"), env_steps=summary.get("env_steps"), sps=summary.get("sps"),
                   host=summary.get("host"), node_id=summary.get("node_id"), run_dir=summary.get("run_dir"))
    except ray.exceptions.RayError as e:  # the trial raised, or its process/node was lost for good
        refusal = refusal_in(e)
        row.update(status="failed" if refusal is None else "refused", error=refusal or _first_line(e), score=None)
        return refusal
    return None


def planned_rows(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"trial": i + 1, "run_uuid": uuid.uuid4().hex, **params} for i, params in enumerate(trials)]


def _first_line(e: BaseException) -> str:
    import re

    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__  # Ray puts the cause's own message last


def _params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in params.items())


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best final score first; trials without a score (no game finished, failed) last."""
    return sorted(rows, key=lambda r: (r.get("score") is None, -(r.get("score") or 0.0), r["trial"]))


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    header = ["rank", "trial", SCORE, "games", "status", *names, "run_uuid"]
    body = [[str(rank), str(r["trial"]), "-" if r.get("score") is None else f"{r['score']:.2f}",
             str(r.get("games", "-")), r.get("status", "-"), *(_fmt(r[n]) for n in names), r["run_uuid"]]
            for rank, r in enumerate(rows, 1)]
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(header)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in [header, *body])


def write_csv(path: Path, rows: list[dict[str, Any]], names: list[str]) -> None:
    columns = ["rank", "trial", SCORE, "games", "updates", "env_steps", "sps", "status", *names, "run_uuid", "host",
               "node_id", "run_dir", "error"]  # node_id: Ray's, as nodes of one machine share its host name
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, extrasaction="ignore")
    writer.writeheader()
    for rank, r in enumerate(rows, 1):
        writer.writerow({**r, "rank": rank, SCORE: r.get("score")})
    atomic_write(path, text.getvalue().encode())  # whole or not at all; private (0600) like the lineage and summaries


def print_comparison(dashboard: str | None, rows: list[dict[str, Any]]) -> None:
    """The dashboard's comparison page of the trials that trained (best first), when they reported to one."""
    trained = [r["run_uuid"] for r in rows if r.get("updates") is not None]  # a trial Ray lost never reached it
    if dashboard and trained:
        from dashboard.client import compare_line

        print(compare_line(dashboard, trained, "trials"), flush=True)


def plan_sweep(args: argparse.Namespace) -> tuple[SearchSpace, dict[str, Any], PPOConfig, list[dict[str, Any]], float, str | None]:
    """Everything a sweep will run, checked before anything starts: (search space, the settings
    every trial shares, their config, the trials, CPUs per trial, the cluster's address)."""
    overrides = overrides_from_args(args)
    space, fixed_from_file = search_space(args)
    address = overrides.pop("ray_address", None)  # the sweep's cluster; trials use the sweep's connection
    if address is not None:
        config_from_overrides({"backend": "ray", "ray_address": address})  # its syntax
    if "ray_address" in fixed_from_file or "ray_address" in space.grid or "ray_address" in space.random:
        raise SweepError("ray_address is the sweep's cluster (--ray-address), not a trial setting")
    fixed = spell_game({**fixed_from_file, **overrides}, canonical_game)  # `--game pong` → Pong
    if args.workers_per_trial is not None:
        fixed["n_workers"] = args.workers_per_trial
    base = config_from_overrides(fixed, game_exists=is_known_game)  # the fixed part alone must be valid
    fixed["data_dir"] = str(Path(base.data_dir).resolve())  # trials run elsewhere (another cwd, another node)
    trials = space.trials()
    for params in trials:  # every trial is checked before anything starts
        config_from_overrides({**fixed, **params}, game_exists=is_known_game)
    cpus = args.cpus_per_trial if args.cpus_per_trial is not None else base.n_workers + 1
    if not (math.isfinite(cpus) and cpus > 0):
        raise SweepError(f"--cpus-per-trial {cpus:g}: expected a number > 0")
    if "torch_threads" not in fixed and "torch_threads" not in space.grid and "torch_threads" not in space.random:
        fixed["torch_threads"] = max(1, int(cpus))  # the trial's share, not every core of its node
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise SweepError(f"--max-concurrent {args.max_concurrent}: expected an integer ≥ 1")
    if args.max_retries < 0:
        raise SweepError(f"--max-retries {args.max_retries}: expected an integer ≥ 0")
    if (refusal := ray_refusal("sweeps")) is not None:
        raise SweepError(refusal)
    return space, fixed, base, trials, cpus, address


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser: OneLineParser = build_parser(prog, "Grid or random search over PPO hyperparameters, each trial a labml run, on Ray. "
                                               "Hyperparameter options below are fixed for every trial; "
                                               "--ray-address is the cluster the sweep runs on.")
    group = parser.add_argument_group("sweep")
    group.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,…", help="try every value (repeatable; all combinations)")
    group.add_argument("--random", action="append", default=[], metavar="NAME=DIST",
                       help="draw from uniform:LOW:HIGH, loguniform:LOW:HIGH, randint:LOW:HIGH or choice:A,B,… (repeatable)")
    group.add_argument("--samples", type=int_in(1, MAX_TRIALS), metavar="N",
                       help=f"random draws per grid point; at most {MAX_TRIALS:_} trials in all (default 1, or the file's)")
    group.add_argument("--sweep-seed", type=int_in(0, MAX_SEED), metavar="S", help="seed of the random draws (default 0)")
    group.add_argument("--config", metavar="FILE.yaml", help="grid/random/samples/seed/fixed from a YAML file; the command line adds to it")
    group.add_argument("--cpus-per-trial", type=float_in(0.0, 1024.0, low_open=True), metavar="C",
                       help="CPUs Ray reserves for each trial, > 0 and ≤ 1024 (default: its workers + 1, the trainer)")
    group.add_argument("--workers-per-trial", type=int_in(1, MAX_WORKERS), metavar="N",
                       help="env workers of each trial, i.e. its --n-workers (default: --n-workers)")
    group.add_argument("--max-concurrent", type=int_in(1, MAX_TRIALS), metavar="K",
                       help="run at most K trials at once (default: as many as the cluster's CPUs allow)")
    group.add_argument("--max-retries", type=int_in(0, 100), default=1, metavar="N",
                       help="re-run a trial whose process or node died up to N times, 0 to 100 (it resumes from its checkpoint) (default: 1)")
    group.add_argument("--resume", metavar="CSV", help="go on with the sweep whose results CSV this is (given with the "
                                                        "options it was started with): its completed trials are kept, the others go on")
    group.add_argument("--csv", metavar="PATH", help="where the results table goes (default <data_dir>/<name>/sweep-<time>.csv)")
    args = parser.parse_args(argv)
    try:
        plan = plan_sweep(args)
    except (ConfigError, SweepError) as e:
        fail(str(e))
    space, fixed, base, trials, cpus, address = plan
    if address is not None and (refusal := cluster_refusal(address)) is not None:
        fail(refusal)  # a cluster this driver cannot join, said before anything starts
    names = [*space.grid, *space.random]
    rows, done = planned_rows(trials), set()
    if args.resume is not None:
        try:
            done = resumed_rows(Path(args.resume), rows, names, SCORE)
        except SweepError as e:
            fail(str(e))
    csv_path = Path(args.resume or args.csv or Path(fixed["data_dir"]) / base.name / f"sweep-{datetime.now():%Y%m%d-%H%M%S}.csv")

    def log(line: str) -> None:
        print(escaped(line), flush=True)  # a trial's status and error come from its run

    print(f"sweep: {len(trials)} trials of {_params(fixed)}; searching {', '.join(names)}; "
          f"{cpus:g} CPUs per trial", flush=True)
    mark = DataDirMark(fixed["data_dir"])
    try:
        signals_stop_as_ctrl_c()  # SIGTERM's kept through ray.init by `connect`
        if not connect(address, cpus, mark.env):
            print(error_line(f"--cpus-per-trial {cpus:g}: expected at most the CPUs of one node of the cluster at {address}"),
                  file=sys.stderr)
            return 2
        with mark:  # written before any trial is submitted; removed at the end
            rows = sorted_rows(run_sweep(trials, fixed, cpus, args.max_retries, args.max_concurrent, log, csv_path.stem, rows, done))
        stop_if_lost_with_the_head(rows, address)
    except DataDirNotShared as e:  # the other trials were stopped (checkpoints kept); finished ones stay in the CSV
        write_csv(csv_path, sorted_rows(rows), names)
        print(error_line(str(e)), file=sys.stderr, flush=True)
        print(csv_path, flush=True)
        return 2
    except KeyboardInterrupt:
        if head_lost():  # what completed is kept in the CSV, written whole; the rest goes on with --resume
            for row in rows:
                row.setdefault("status", "lost")
            write_csv(csv_path, sorted_rows(rows), names)
            print(escaped(lost_line(str(address), rows, go_on_command(prog, argv_of(argv), csv_path))), file=sys.stderr, flush=True)
            print(csv_path, flush=True)  # the last line, as at the end of every sweep
            return 1
        print("\nsweep interrupted: running trials were stopped (their last checkpoints are kept)", file=sys.stderr)
        return 130
    finally:
        stop_ray()  # a private instance stops; a cluster is only disconnected from
    print()
    print(escaped(table(rows, names), lines=True))
    write_csv(csv_path, rows, names)
    print_comparison(fixed.get("dashboard"), rows)
    print(csv_path, flush=True)
    return 0 if all(r.get("status") == "completed" for r in rows) else 1


__all__ = ["main", "run_trial", "sorted_rows"]

if __name__ == "__main__":
    sys.exit(main())
