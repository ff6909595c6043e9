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
2 when a trial's node cannot see `--data-dir` (experiments/shared_data_dir.py): one line on
stderr, the other trials stopped at a checkpoint, the CSV written with what finished; and 130 when
a person stopped it (Ctrl-C or SIGTERM): the running trials stopped at a checkpoint, the CSV
written, and the command that goes on said.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from configs.cli import OneLineParser, build_parser, float_in, int_in, overrides_from_args, spell_game
from configs.fields import MAX_SEED, MAX_WORKERS
from configs.launch import config_from_overrides
from configs.ppo import ConfigError, PPOConfig
from configs.refusals import error_line, fail
from configs.terminal import escaped
from experiments.ray_tasks import Ending, TaskEnd, connection_for, remote_task, run_tasks, run_trial
from experiments.run.console import say  # people's lines on stderr: stdout holds the compare address and the CSV path
from experiments.run.stopping import signals_stop_as_ctrl_c
from experiments.shared_data_dir import DataDirMark
from experiments.sweep_resume import argv_of, go_on_command, lost_line, resumed_rows
from experiments.sweep_rows import TrialRow, params_text, planned_rows, print_comparison, sorted_rows, table, write_csv
from experiments.sweep_space import MAX_TRIALS, SearchSpace, SweepError, search_space
from experiments.sweep_status import SweepStatus
from game.atari import canonical_game, is_known_game
from ray_setup.connection import RayConnection, connection_refusal
from ray_setup.installed import ray_refusal

PROG = "python -m experiments.sweep"
def run_sweep(connection: RayConnection, rows: list[TrialRow], fixed: dict[str, Any], cpus_per_trial: float,
              max_retries: int, max_concurrent: int | None, name: str, kept: frozenset[int] = frozenset()) -> Ending:
    """Every trial but those in `kept` (completed in a resumed sweep) as a Ray task; each row filled
    as its trial ends and a line said, and the trials' status shown as they run
    (experiments/sweep_status.py). The dashboard lists each run as `name` and its trial number."""
    task = remote_task(connection.ray, run_trial, cpus_per_trial, max_retries)
    calls = [(i, ({**fixed, **row.params}, row.run_uuid, f"{name} trial {row.trial}"))
             for i, row in enumerate(rows) if i not in kept]
    started, finished = time.perf_counter(), len(kept)
    status = SweepStatus(rows, Path(fixed["data_dir"]) / str(fixed.get("name", PPOConfig.name)), say,
                         lambda: connection.nodes_lost, connection.node_name)

    def ended(end: TaskEnd) -> None:
        nonlocal finished
        finished += 1
        rows[end.key].ended(end.summary, end.error)
        if end.summary is not None:
            status.seen_now(end.key, end.summary)  # a retry that ran to its end between two looks is counted too
        say(f"[{finished}/{len(rows)} after {time.perf_counter() - started:.0f} s] {rows[end.key].result_line()}")

    scheduled = run_tasks(connection, task, calls, max_concurrent or len(rows), ended, status.look)
    status.look(frozenset())  # the last block: every trial's end
    why_stopped = "stopped by a person"
    if scheduled.ending is Ending.DATA_DIR_REFUSED:  # the refused trial, and those stopped because of it
        assert scheduled.refused is not None  # given with that ending
        refused = rows[scheduled.refused]
        refused.ended(None, scheduled.refusal, status="refused")
        why_stopped = f"stopped: trial {refused.trial}'s node cannot see --data-dir"
    for end in scheduled.ends:
        if end.stopped:  # its run's summary (interrupted at a checkpoint); one stopped before its run began is named here
            rows[end.key].ended(end.summary, why_stopped if end.summary is None else None, status="stopped")
    return scheduled.ending


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
    if "torch_threads" not in fixed and "torch_threads" not in space.grid and "torch_threads" not in space.random:
        fixed["torch_threads"] = max(1, int(cpus))  # the trial's share, not every core of its node
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
    if (refusal := connection_refusal(address)) is not None:
        fail(refusal)  # a cluster this driver cannot join, or a Ray it cannot use, said before anything starts
    names = [*space.grid, *space.random]
    rows, done = planned_rows(trials), set()
    if args.resume is not None:
        try:
            done = resumed_rows(Path(args.resume), rows, names)
        except SweepError as e:
            fail(str(e))
    csv_path = Path(args.resume or args.csv or Path(fixed["data_dir"]) / base.name / f"sweep-{datetime.now():%Y%m%d-%H%M%S}.csv")
    say(f"sweep: {len(trials)} trials of {params_text(fixed)}; searching {', '.join(names)}; {cpus:g} CPUs per trial")
    mark = DataDirMark(fixed["data_dir"])
    signals_stop_as_ctrl_c()  # SIGINT and SIGTERM; the connection keeps SIGTERM's through ray.init
    ending: Ending | None = None
    refused = submitted = False
    try:
        with connection_for(address, cpus, mark.env) as connection:  # a private Ray stops at its end; a cluster is left
            if not connection.fits(cpus):
                print(error_line(f"--cpus-per-trial {cpus:g}: expected at most the CPUs of one node of the cluster at {address}"),
                      file=sys.stderr)
                refused = True
            else:
                with mark:  # written before any trial is submitted; removed at the end
                    submitted = True
                    ending = run_sweep(connection, rows, fixed, cpus, args.max_retries, args.max_concurrent, csv_path.stem,
                                       frozenset(done))
    except KeyboardInterrupt:  # while Ray started or was joined, while trials ran, or as the sweep ended
        if submitted and ending is None:
            ending = Ending.STOPPED  # what ended is in the rows: the CSV is written with it
    if refused:
        return 2
    if ending is None:
        say("\nsweep stopped while Ray started: no trial was submitted, nothing was written")
        return 130
    return report(ending, sorted_rows(rows), names, csv_path, fixed.get("dashboard"),
                  go_on_command(prog, argv_of(argv), csv_path), address)


def report(ending: Ending, rows: list[TrialRow], names: list[str], csv_path: Path, dashboard: str | None, go_on: str,
           address: str | None) -> int:
    """How the sweep ended, and its exit code. However it ended, the CSV is written whole with what
    completed (its path the last line on stdout), so that `--resume CSV` (the command `go_on`) goes
    on with the others, each from its run's last checkpoint."""
    if ending is Ending.HEAD_LOST:  # those that did not complete go on with --resume
        for row in rows:
            row.status = row.status or "lost"
    write_csv(csv_path, rows, names)
    if ending is Ending.DONE:
        say("\n" + table(rows, names))
        print_comparison(dashboard, rows)
        code = 0 if all(r.status == "completed" for r in rows) else 1
    elif ending is Ending.STOPPED:
        say("\nsweep interrupted: running trials were stopped (their last checkpoints are kept); go on with: " + escaped(go_on))
        code = 130
    elif ending is Ending.DATA_DIR_REFUSED:  # the other trials were stopped at a checkpoint
        print(error_line(next(r.error for r in rows if r.status == "refused") or ""), file=sys.stderr, flush=True)
        code = 2
    else:
        print(escaped(lost_line(str(address), rows, go_on)), file=sys.stderr, flush=True)
        code = 1
    print(csv_path, flush=True)
    return code


__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
