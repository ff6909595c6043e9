"""Training the seeds that `python -m experiments.curves` draws: one run per seed and side, a few at
a time, each in its own session, none outliving the command."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from configs.machine import shared_cores_environment, usable_cores
from configs.refusals import fail
from experiments.run.folders import GAMES


@dataclass(frozen=True)
class SeedRun:
    """One seed of one side to train: the command, and the folder its run goes in."""

    side: str
    seed: int
    out: Path
    command: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = ()  # added to this process's environment


def seed_run(side: str, seed: int, args: argparse.Namespace, extra: Sequence[str]) -> SeedRun:
    out = Path(args.out) / "runs" / side / f"seed{seed}"
    if side == "project":
        command = [sys.executable, "-m", "experiments.breakout", "--seed", str(seed), "--total-env-steps", str(args.total_env_steps),
                   "--stop-after-env-steps", str(args.budget), "--data-dir", str(out), "--name", "project", *extra]
    else:
        command = [sys.executable, "-m", "experiments.peer_sb3", "--seed", str(seed), "--total-env-steps", str(args.total_env_steps),
                   "--stop-after-env-steps", str(args.budget), "--run-dir", str(out)]
    if args.jobs == 1:
        return SeedRun(side, seed, out, tuple(command))
    # Runs at once share the cores: idle torch threads sleep rather than spin (configs/machine.py).
    environment = shared_cores_environment()
    if side != "project":  # SB3's torch would take every core: with others running at once, its share of them
        environment["OMP_NUM_THREADS"] = str(max(1, usable_cores() // args.jobs))
    return SeedRun(side, seed, out, tuple(command), tuple(sorted(environment.items())))


def _die_with_parent() -> None:
    """In a run's process, before it starts: SIGTERM when curves ends, however it ends (even by
    SIGKILL), so a run never outlives the command that started it. The run stops at its next
    update and checkpoints, as after Ctrl-C."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def train_seeds(runs: Sequence[SeedRun], jobs: int) -> tuple[list[Path], list[str]]:
    """Train the runs, `jobs` at a time; each run's folder, in the order given, and a line for
    each run that was stopped early.

    Each run has its own session, so a Ctrl-C or SIGTERM reaches it once, from here: curves passes
    on every SIGINT and SIGTERM it gets (the first stops each run at its next update, checkpointed
    and resumable; a second stops it at once), waits for the runs to end, and exits. A run that
    fails stops the others the same way. A run stopped by a SIGINT or SIGTERM sent to it alone
    (`kill -TERM -PGID`, when that seed has gone far enough) is not a failure: it ends
    at its checkpoint, the others go on, and its label's curve ends where it stopped. Each run's
    stderr goes to `stderr.log` in its folder.
    """
    pending: list[SeedRun] = list(runs)
    going: dict[subprocess.Popen[bytes], SeedRun] = {}
    signals: list[int] = []
    failure: str | None = None
    stopped: list[str] = []

    def stop_all(signum: int, _frame: object = None) -> None:
        signals.append(signum)
        for process in going:
            process.send_signal(signum)

    previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or going:
            while pending and len(going) < jobs and not signals and failure is None:
                run = pending.pop(0)
                run.out.mkdir(parents=True, exist_ok=True)
                print(f"curves: {run.side} seed {run.seed}: {' '.join(run.command[1:])}", flush=True)
                with (run.out / "stderr.log").open("w") as log:
                    going[subprocess.Popen(run.command, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                                           env={**os.environ, **dict(run.environment)}, preexec_fn=_die_with_parent)] = run
            if not going:
                break
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)  # until some run ends (left for poll() to reap)
            for process in [p for p in going if p.poll() is not None]:
                run = going.pop(process)
                by = stopping_signal(process.returncode)
                if by is not None and not signals and failure is None:  # not one of ours: a stop sent to this run alone
                    stopped.append(f"{run.side} seed {run.seed} was stopped by {by} sent to it alone; its label's curve ends where it stopped")
                    print(f"curves: {stopped[-1]} (the other runs go on)", file=sys.stderr, flush=True)
                elif process.returncode != 0 and failure is None and not signals:
                    failure = f"{run.side} seed {run.seed} exited with {process.returncode}: {_error_line(run.out / 'stderr.log')}"
                    stop_all(signal.SIGTERM)
                    signals.clear()  # the failure is what ends this command, not a signal
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signals:
        print(f"curves: stopped by {signal.Signals(signals[0]).name}; each run stopped at a checkpoint "
              f"(resume one with python -m experiments.breakout --resume UUID --data-dir ITS_FOLDER)", file=sys.stderr)
        sys.exit(128 + signals[0])
    if failure is not None:
        fail(failure)
    return [_run_folder(run) for run in runs], stopped


def stopping_signal(returncode: int) -> str | None:
    """The stop request (SIGINT or SIGTERM) that ended a run, from its exit status: 128 + the
    signal where the run stopped at a checkpoint (experiments/run/stopping.py, and the peer), minus
    the signal where it had no handler yet; None for any other ending (a fault, a SIGKILL)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if returncode in (128 + sig, -sig):
            return sig.name
    return None


def _error_line(log: Path) -> str:
    """A failed run's error: its `error:` line (a run ends with its next commands), else its last line."""
    lines = log.read_text(errors="replace").strip().splitlines()
    return ([line for line in lines if line.startswith("error:")] or lines or ["(no output)"])[-1]


def _run_folder(run: SeedRun) -> Path:
    games = sorted(run.out.rglob(GAMES))
    if not games:
        fail(f"{run.side} seed {run.seed} wrote no games.csv under {run.out}")
    return games[-1].parent


def dashboard_of(extra: Sequence[str]) -> str | None:
    """The --dashboard given to the training runs (the options curves passes on to them), or None."""
    given = None
    for i, arg in enumerate(extra):
        if arg == "--dashboard" and i + 1 < len(extra):
            given = extra[i + 1]
        elif arg.startswith("--dashboard="):
            given = arg.split("=", 1)[1]
    return None if given is None or given.strip().lower() in ("none", "null") else given


def print_comparison(extra: Sequence[str], folders: Sequence[Path]) -> None:
    """The dashboard's comparison page of the runs trained (a run's folder is named by its uuid), when
    they reported to one."""
    dashboard = dashboard_of(extra)
    if dashboard is not None and folders:
        from dashboard.client import compare_line

        print(f"curves: {compare_line(dashboard, [folder.name for folder in folders], 'runs')}", flush=True)
