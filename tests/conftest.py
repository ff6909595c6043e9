"""Shared helpers: run the real CLI, find leftover processes through the process table, and
train briefly from a seed on a real pool."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from configs.ppo import PPOConfig
from experiments.breakout import main as train_main
from game.vector import PipePool, game_specs
from ppo.seeding import derive_seeds
from ppo.trainer import Trainer
from ray_setup.installed import ray_installed
from ray_setup.private import start_private_ray, stop_ray
from tests import forked_run, process_table
from tests.made_once import made_once, set_root

# Every process a test's run starts (workers, the forkserver, the resource tracker) inherits this
# variable, so leftovers are found even after they were re-parented to init.
MARK = "BREAKOUT_TEST_MARK"

REPO = Path(__file__).resolve().parents[1]

ROLLOUT_FIELDS = ("observations", "actions", "log_probs", "values", "rewards", "terminals", "truncations")


def train_from_seed(config: PPOConfig, pool_factory=PipePool, updates: int = 0
                    ) -> tuple[dict[str, np.ndarray], list[torch.Tensor]]:
    """Start `config`'s games from its seed on a real pool, then fill one rollout (`updates=0`)
    or run `updates` whole updates; returns copies of the last rollout and of the parameters."""
    seeds = derive_seeds(config.seed, config.n_envs)
    with pool_factory(game_specs(config, seeds.env_seeds), config.envs_per_worker) as pool:
        trainer = Trainer(config, pool, seeds, torch.device("cpu"))
        trainer.reset_envs()
        if updates == 0:
            trainer.collect()
        for _ in range(updates):
            trainer.iteration()
        rollout = {name: getattr(trainer.rollout, name).copy() for name in ROLLOUT_FIELDS}
        return rollout, [p.detach().clone() for p in trainer.model.parameters()]


def refused_in_process(capsys: pytest.CaptureFixture[str], argv: list[str],
                       main: Callable[[list[str]], object] = train_main) -> str:
    """A command's main(argv) (the training command's unless told) in this process, for a refusal
    made before anything starts (it needs no Python of its own to prove it): exit 2, one stderr
    line (returned), nothing on stdout, no traceback, no worker started."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and out == "" and "Traceback" not in err, (out[-1000:], err[-3000:])
    assert multiprocessing.active_children() == []  # no worker was ever started
    return lines[0]


def wait_until_no_processes(marker: str, timeout_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := process_table.marked(MARK, marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# `experiments.breakout` with a hold after the first checkpoint (update 1), so that a test can signal
# or inspect a run that is sure to be mid-training, whatever the machine's load: it touches
# HOLD_FILE, then waits until the run has seen a stop request (touching HOLD_FILE.stop), and with
# HOLD_UNTIL=forever goes on waiting after it, for a second signal to interrupt; with
# HOLD_UNTIL=release it waits for HOLD_FILE.go instead, then trains on to its end.
HELD_RUN = """
import os, sys, time
from pathlib import Path
from ppo.trainer import Trainer
original, hold = Trainer.state_dict, Path(os.environ["HOLD_FILE"])
def state_dict_then_hold(self, live_values):
    state = original(self, live_values)
    if self.update == 1 and not hold.exists():
        hold.touch()
        while os.environ["HOLD_UNTIL"] == "release" and not hold.with_suffix(".go").exists():
            time.sleep(0.01)
        if os.environ["HOLD_UNTIL"] == "release":
            return state
        while not self.should_stop():
            time.sleep(0.01)
        hold.with_suffix(".stop").touch()
        while os.environ["HOLD_UNTIL"] == "forever":
            time.sleep(0.01)
    return state
Trainer.state_dict = state_dict_then_hold
from experiments.breakout import main
sys.exit(main(sys.argv[1:]))
"""


def wait_for_file(path: Path, process: subprocess.Popen[str], timeout_s: float = 600) -> None:
    """Until `path` exists; fails at once (with the run's stderr) if the process ends first."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the run ended (exit {process.returncode}) first:\n{process.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"no {path} after {timeout_s} s"
        time.sleep(0.02)


class Cli:
    """Runs `python -m <module> ...` from the repo with a unique marker in its environment, each run
    forked from a Python that has already imported torch and the other libraries (tests/forked_run.py)."""

    def __init__(self) -> None:
        self.marker = uuid.uuid4().hex

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{MARK: self.marker})
        env.pop("labml_app_url", None)
        return env

    def run(self, module: str, *args: str, timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        """From the repo, or from `cwd` with the repo's code (as a user runs it from their own folder)."""
        env = self.env() if cwd == REPO else dict(self.env(), PYTHONPATH=str(REPO))
        return forked_run.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, text=True, timeout=timeout)

    def start(self, module: str, *args: str) -> subprocess.Popen[str]:
        return forked_run.popen([sys.executable, "-m", module, *args], cwd=REPO, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def start_held(self, hold_file: Path, *args: str, until: str = "stop") -> subprocess.Popen[str]:
        """`experiments.breakout *args`, returned once it holds after its first checkpoint (see HELD_RUN)."""
        env = dict(self.env(), HOLD_FILE=str(hold_file), HOLD_UNTIL=until)
        process = forked_run.popen([sys.executable, "-c", HELD_RUN, *args], cwd=REPO, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_file(hold_file, process)
        return process

    def leftovers(self) -> list[int]:
        return wait_until_no_processes(self.marker)

    def kill_leftovers(self) -> list[int]:
        """SIGKILL every process still carrying this session's marker (those it killed)."""
        killed = []
        for pid in process_table.marked(MARK, self.marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed


def run_once(cli: Cli, data_dir: Path, *args: str) -> dict:
    """The summary of `experiments.breakout *args --data-dir data_dir`, as if it had just run there.
    A run is a few seconds of real training, and many tests only need one to exist before they
    resume, craft or attack it: the first call with these `args` in the session (on any worker)
    runs it in a folder of the session's (tests/made_once.py), and every call copies that run
    folder into `data_dir` (file modes kept), with the paths that summary.json and labml's
    configs.yaml record rewritten to the copy. The copy is the same run: the same uuid, files and
    checkpoints (whose config's data_dir a resume's --data-dir replaces)."""
    def make(folder: Path) -> None:
        result = cli.run("experiments.breakout", *args, "--data-dir", str(folder))
        assert result.returncode == 0, result.stderr[-2000:]

    made = made_once(json.dumps(["experiments.breakout", *args]), make)
    shutil.copytree(made, data_dir, dirs_exist_ok=True)
    for path in (*data_dir.rglob("summary.json"), *data_dir.rglob("configs.yaml")):
        path.write_text(path.read_text().replace(str(made), str(data_dir)))
    (summary_path,) = data_dir.rglob("summary.json")
    return json.loads(summary_path.read_text())


def pytest_sessionfinish() -> None:
    """Each pytest process (each xdist worker) stops the cluster and the zygote it started, if any
    (a session cut short by -x or Ctrl-C); were this skipped (a crash, a kill), the zygote ends anyway
    when its stdin, this process's pipe, closes."""
    _stop_the_cluster()
    forked_run.ZYGOTE.stop()


@pytest.fixture(scope="session", autouse=True)
def _made_once_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    set_root(tmp_path_factory)


@pytest.fixture
def cli() -> Iterator[Cli]:
    session = Cli()
    yield session
    # A test that fails before it stops what it started (a sweep of 100,000 updates, a held run)
    # must not leave it loading the cores for the rest of the suite. A test that passed has
    # already checked that nothing is left (`leftovers`).
    session.kill_leftovers()


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[object]:
    """One local Ray (2 CPUs) shared by a module's in-process tests: Ray takes seconds to start.
    Private as every Ray the commands start: loopback only, a token of its own."""
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    ray = start_private_ray(2, log_to_driver=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        stop_ray()


@pytest.fixture(scope="session")
def finished_population() -> dict:
    """A real population of 2 (6 updates each, an exploit after update 3) run through without a
    stop, made once a session for every test that compares with it or attacks a copy of it
    (tests/pbt_support.py); the tests only read it."""
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    from tests.pbt_support import POPULATION, make_finished_population, read_finished_population  # it imports this module
    return read_finished_population(made_once(json.dumps(["experiments.pbt", *POPULATION]), make_finished_population))


# The worker's cluster while its cluster tests run: the generator that started it (its clean-up and
# checks run when resumed) and what it yielded.
_running_cluster: list[tuple[Iterator[object], object]] = []


@pytest.fixture
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> object:
    """One real 3-node Ray cluster per pytest worker, for every cluster test (tests/cluster_support.py):
    started by the worker's first cluster test and stopped right after its last one (the scheduler
    runs a worker's cluster files one after another, tests/scheduling.py), not at the session's end,
    so that its idle nodes (about 6% of a core) do not load the cores for the rest of the suite."""
    if not _running_cluster:
        from tests.cluster_support import started_cluster

        started = started_cluster(tmp_path_factory)
        _running_cluster.append((started, next(started)))
    return _running_cluster[0][1]


def _stop_the_cluster() -> None:
    """Stops the worker's cluster, if one runs; its checks (nothing left) fail the test just run."""
    if _running_cluster:
        started, _ = _running_cluster.pop()
        next(started, None)


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or "local_cluster" not in getattr(nextitem, "fixturenames", ()):
        _stop_the_cluster()


# What the fast selection (`-m "not slow and not ray and not browser"`) leaves out, by what a test
# uses rather than by a list kept by hand: a whole command-line session, a dashboard server (the
# module's, or one a test starts itself: every such test checks with `no_leftover_processes` that
# it leaves none), a Ray.
SLOW_FIXTURES = {"cli", "dashboard", "finished_run", "pool_stack", "no_leftover_processes"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
        if "ray_instance" in fixtures:
            item.add_marker(pytest.mark.ray)
        if item.path.name == "test_browser.py":
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(optionalhook=True)  # the hook exists only where xdist is loaded (not with -p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist=loadfile` hands out the files longest first, the cluster files as one (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirstScheduling

    return LongestFirstScheduling(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A skipped fingerprint test means nothing checked that moved code still learns the same: say so
    in a banner of its own at the end, not only as one line among the skips."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if "test_fingerprint.py" in getattr(report, "nodeid", "")]
    if skipped:
        terminalreporter.section("WHAT IS LEARNED WAS NOT CHECKED", sep="!", red=True, bold=True)
        _, _, reason = skipped[0].longrepr if isinstance(skipped[0].longrepr, tuple) else ("", "", str(skipped[0].longrepr))
        terminalreporter.write_line(f"tests/test_fingerprint.py was skipped on this machine: {reason}", red=True, bold=True)
        terminalreporter.write_line("No test here pins the learner bit for bit; record this machine's fingerprint "
                                    "from the commit before a change, then run the suite again.", red=True)
