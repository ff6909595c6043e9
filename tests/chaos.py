"""Break real training runs on purpose and check they survive (a test harness, run from the checkout): `python -m tests.chaos`.

Two legs, each a short real run of `python -m experiments.breakout` in a subprocess:
1. **interrupt and resume**: SIGTERM mid-run (repeatedly), `--resume` each time, until done; the
   final parameters must equal those of an uninterrupted run with the same seed (exact resume).
2. **killed workers**: SIGKILL random worker processes while it trains, plus a SIGTERM and a
   resume; the run must finish with every kill counted as a worker restart. A replacement worker
   starts its games from fresh seeds, so this leg's parameters are *meant* to differ.
Each signal lands at a random moment of an update, timed by the run's own pace (the time between
its first two checkpoints), so that a run of a few updates is enough on a fast machine or a slow one.
After both, no process of any run may be left alive. The last line printed is a JSON summary.
Under the tests, whose zygote forked the harness, the runs are forked from that zygote too
(tests/forked_run.py): the same command, without the seconds of imports each would pay again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from configs.cli import OneLineParser, docstring_help, int_in
from configs.fields import MAX_SEED, ConfigError
from configs.launch import config_from_overrides
from configs.refusals import fail
from tests import forked_run
from tests.process_table import age_s, children, marked
from tests.zygote import MARK


def worker_pids(trainer_pid: int, min_age_s: float = 1.0) -> list[int]:
    """The game workers (children of the trainer's forkserver) that have been up for a while: a
    replacement still starting is retried by the pool itself, not replaced, so it is spared."""
    workers: list[int] = []
    for child in children(trainer_pid):
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            if any("forkserver" in part for part in psutil.Process(child).cmdline()):
                workers.extend(pid for pid in children(child) if age_s(pid) >= min_age_s)
    return workers


class Runner:
    def __init__(self, data_dir: Path, base_args: list[str], marker: str) -> None:
        self.data_dir, self.base_args = data_dir, base_args
        self.env = dict(os.environ, **{MARK: marker})

    def start(self, *args: str) -> subprocess.Popen[str]:
        start = forked_run.popen if forked_run.ZYGOTE.lent() else subprocess.Popen
        return start([sys.executable, "-m", "experiments.breakout", *self.base_args, *args, "--data-dir", str(self.data_dir)],
                     env=self.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    @staticmethod
    def finish(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
        stdout, stderr = process.communicate(timeout=1800)
        last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
        if not last.endswith("summary.json"):
            raise RuntimeError(f"run gave no summary (exit {process.returncode}):\n{stderr[-2000:]}")
        return process.returncode, json.loads(Path(last).read_text())


def newest_checkpoint_time(data_dir: Path) -> float:
    times = []
    for path in data_dir.glob("*/*/checkpoints/checkpoint.pt"):
        try:
            times.append(path.stat().st_mtime)
        except FileNotFoundError:  # mid-rotation
            continue
    return max(times, default=0.0)


def wait_for_checkpoint(run: subprocess.Popen[str], data_dir: Path, after: float, timeout_s: float = 600) -> float:
    """Wait until a checkpoint newer than `after` is on disk (or the run ended); return its time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run.poll() is None:
        if (written := newest_checkpoint_time(data_dir)) > after:
            return written
        time.sleep(0.05)
    return after


def update_seconds(run: subprocess.Popen[str], data_dir: Path, started: float) -> float:
    """The time one update takes in this run (its first two checkpoints apart): each random wait
    below is a fraction of it, so that a signal lands within the next update or two, whatever the
    machine's speed, and a short run still has updates left when it lands."""
    first = wait_for_checkpoint(run, data_dir, started)
    return max(0.0, wait_for_checkpoint(run, data_dir, first) - first)


def wait_for_victims(run: subprocess.Popen[str], timeout_s: float = 600) -> list[int]:
    """The run's workers that may be killed, once there is one (none if the run ended first)."""
    deadline = time.monotonic() + timeout_s
    while not (victims := worker_pids(run.pid)) and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return victims


def interrupted_run(runner: Runner, rng: random.Random, interruptions: int, kills: int) -> dict[str, Any]:
    """Run to the end, SIGTERM-ing it `interruptions` times (resuming each time) and SIGKILL-ing
    `kills` random workers along the way."""
    resumes, kills_done, run_uuid = 0, 0, None
    args: tuple[str, ...] = ()
    while True:
        started = time.time()
        run = runner.start(*args)
        kills_now = kills if resumes == 0 else 0
        update_s = update_seconds(run, runner.data_dir, started) if kills_now or resumes < interruptions else 0.0
        last_kill = started
        for _ in range(kills_now):
            time.sleep(rng.uniform(0.0, update_s))  # land anywhere in the next update
            victims = wait_for_victims(run)
            if run.poll() is None and victims:
                os.kill(rng.choice(victims), signal.SIGKILL)
                kills_done, last_kill = kills_done + 1, time.time()
        if resumes < interruptions:
            # A kill is only noticed (and the replacement counted) when the pool next steps the
            # games; the first checkpoint after a kill may end an update whose rollout came before
            # it. The second one after it is sure to count the replacement, so interrupt only then:
            # otherwise the count of replacements can honestly fall short of the kills.
            written = wait_for_checkpoint(run, runner.data_dir, last_kill)
            if last_kill > started:
                wait_for_checkpoint(run, runner.data_dir, written)
            time.sleep(rng.uniform(0.0, update_s))  # land anywhere in the next update
            if run.poll() is None:
                run.send_signal(signal.SIGTERM)
        code, summary = Runner.finish(run)
        run_uuid = summary["run_uuid"]
        if summary["status"] == "completed":
            summary.update(resumes=resumes, kills=kills_done)
            return summary
        if code != 128 + signal.SIGTERM:
            raise RuntimeError(f"run {run_uuid} ended with {code}: {summary.get('error')}")
        resumes += 1
        args = ("--resume", run_uuid)


def same_parameters(a: Path, b: Path) -> bool:
    import torch

    from ppo.checkpoint import load_checkpoint

    first, second = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


PROG = "python -m tests.chaos"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    description, epilog = docstring_help(__doc__)  # the docstring is Markdown; --help prints it plain
    parser = OneLineParser(prog=prog, description=description, epilog=epilog)
    parser.add_argument("--updates", type=int_in(1, 10_000), default=12, metavar="INT", help="updates per run, 1 to 10_000 (default: 12)")
    parser.add_argument("--interruptions", type=int_in(0, 100), default=2, metavar="INT",
                        help="SIGTERM + resume cycles per leg, 0 to 100 (default: 2)")
    parser.add_argument("--kills", type=int_in(0, 100), default=3, metavar="INT", help="workers SIGKILLed in the second leg, 0 to 100 (default: 3)")
    parser.add_argument("--worker-steps", type=int_in(1, 100_000), default=128, metavar="INT",
                        help="steps per game per rollout of each run (4 games, 4 minibatches), 1 to 100_000 (default: 128)")
    parser.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, metavar="INT", help="seeds the runs and the chaos (default: 0)")
    parser.add_argument("--data-dir", default=None, metavar="DIR", help="where the runs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    from experiments.run.plan import check_can_start  # torch, once the command line is accepted

    if args.data_dir is not None:
        try:  # the runs' own check, before the first of them starts
            check_can_start(config_from_overrides({"data_dir": args.data_dir, "device": "cpu"}))
        except ConfigError as e:
            fail(str(e))

    rng = random.Random(args.seed)
    # The test's own marker where a test started the harness, so that its own search for leftovers
    # (and its clean-up) finds the runs too; this process is left out of both searches.
    marker = os.environ.get(MARK) or os.urandom(16).hex()
    base = ["--updates", str(args.updates), "--n-workers", "4", "--worker-steps", str(args.worker_steps), "--minibatches", "4",
            "--epochs", "2", "--checkpoint-every", "1", "--seed", str(args.seed), "--max-worker-restarts", str(args.kills + 1)]
    with tempfile.TemporaryDirectory(prefix="chaos-") as temp:
        root = Path(args.data_dir or temp)
        straight = Runner(root / "straight", base, marker)
        code, reference = Runner.finish(straight.start())
        if code != 0:
            fail(f"the uninterrupted reference run failed with exit code {code}")
        resumed = interrupted_run(Runner(root / "resumed", base, marker), rng, args.interruptions, kills=0)
        killed = interrupted_run(Runner(root / "killed", base, marker), rng, min(args.interruptions, 1), kills=args.kills)
        time.sleep(0.5)
        leftovers = marked(MARK, marker)
        result = {
            "updates_completed": resumed["updates"] + killed["updates"],
            "worker_restarts": killed["worker_restarts"],
            "workers_killed": killed["kills"],
            "resumes": resumed["resumes"] + killed["resumes"],
            "games": resumed["games"] + killed["games"],
            "params_match_uninterrupted": same_parameters(Path(reference["checkpoint"]), Path(resumed["checkpoint"])),
            "killed_leg_params_match": same_parameters(Path(reference["checkpoint"]), Path(killed["checkpoint"])),
            "processes_left": len(leftovers),
        }
    print(json.dumps(result))
    ok = result["params_match_uninterrupted"] and result["worker_restarts"] == result["workers_killed"] and not leftovers
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
