"""`python -m experiments.sweep`: a real 2-trial sweep on a local Ray instance, and its input checks."""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from experiments.run.folders import RunFolder
from experiments.run.safe_files import UnsafeRunFolder
from experiments.run.updates_csv import read_updates
from experiments.sweep import main
from experiments.sweep_rows import TrialRow, sorted_rows
from experiments.sweep_space import SearchSpace, SweepError, parse_distribution, search_space
from ray_setup.installed import ray_installed
from tests import forked_run, process_table
from tests.conftest import MARK, REPO, Cli, wait_for_file
from tests.ray_checks import attack, check_private, check_refused, snapshot

requires_ray = pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[ray]")')


@requires_ray
def test_two_trial_sweep_runs_full_runs_and_ranks_them(cli, tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text("grid:\n  learning_rate: [1.0e-4, 3.0e-4]\nfixed:\n  worker_steps: 16\n  minibatches: 2\n")
    out = tmp_path / "results.csv"
    result = cli.run("experiments.sweep", "--config", str(spec), "--updates", "1", "--workers-per-trial", "2",
                     "--cpus-per-trial", "1", "--epochs", "1", "--data-dir", str(tmp_path / "runs"), "--csv", str(out),
                     timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout == f"{out}\n"  # stdout holds what a script reads; people's lines are on stderr
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["rank"] for r in rows] == ["1", "2"]
    assert sorted(float(r["learning_rate"]) for r in rows) == [1e-4, 3e-4]
    for row in rows:  # each trial is a whole labml run with its own summary and checkpoint
        assert row["status"] == "completed", row
        summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        assert summary["run_uuid"] == row["run_uuid"] and summary["updates"] == 1
        assert summary["env_steps"] == 2 * 16 and Path(summary["checkpoint"]).is_file()
        assert Path(row["run_dir"]).parent == tmp_path / "runs" / "breakout"
        # labml's comment, which the dashboard lists beside the run: the sweep (its table's name) and the trial.
        run_yaml = yaml.safe_load((Path(row["run_dir"]) / "run.yaml").read_text())
        assert run_yaml["comment"] == f"results trial {row['trial']}", run_yaml
    assert re.search(r"^rank +trial +score_mean_100 +games +status +retries +node +learning_rate +run_uuid$", result.stderr, re.M), result.stderr
    # The trials' status as they ran (experiments/sweep_status.py): a block at each change, the last
    # one with both trials ended, on their nodes, none run again.
    blocks = result.stderr.split("sweep after ")[1:]
    assert blocks[0].splitlines()[0].endswith("s: 2 starting"), blocks[0]  # both submitted, neither training yet
    last = blocks[-1].splitlines()
    assert last[0].endswith("s: 2 completed"), last
    assert [line.split()[:3] for line in last[1:3]] == [["trial", "1", "completed"], ["trial", "2", "completed"]], last
    assert all("retries 0  update 1" in line for line in last[1:3]), last
    # Ray's advice to turn off its private instance's token (issue 71) is not the user's to follow.
    assert "Token authentication" not in result.stderr and "RAY_AUTH_MODE" not in result.stderr, result.stderr
    assert cli.leftovers() == []  # Ray's processes and every trial's workers are gone


@requires_ray
def test_a_sweeps_ray_is_private_and_a_sigterm_stops_its_trials_and_leaves_nothing(cli, tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """While a trial trains, every socket of the sweep's processes (Ray's daemons and workers, the
    trial's) listens on loopback only, its token file is this user's alone, and a client without
    the token runs nothing: the trial goes on with its own code.

    ray.init puts its own SIGTERM handler in the driver, one that aborts it: the trials would lose
    their stop and a private Ray its shutdown. A SIGTERM is taken as Ctrl-C is. And trials share the
    cores, so the sweep has their idle torch threads sleep (OMP_WAIT_POLICY=PASSIVE), here from a
    shell that did not set it."""
    monkeypatch.delenv("OMP_WAIT_POLICY")  # as in a user's shell (the suite sets it, tests/__init__.py)
    process = cli.start("experiments.sweep", "--grid", "learning_rate=1e-4,3e-4", "--updates", "100000",
                        "--worker-steps", "16", "--minibatches", "2", "--epochs", "1", "--workers-per-trial", "1",
                        "--cpus-per-trial", "1", "--max-concurrent", "1", "--data-dir", str(tmp_path / "runs"))
    deadline = time.monotonic() + 600
    while not any((tmp_path / "runs").rglob("updates.csv")):  # the event: a trial is training
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no trial trained within 600 s"
        time.sleep(0.1)
    trials = {pid for pid in process_table.marked(MARK, cli.marker) if b"ray::run_trial" in _cmdline(pid)}
    assert trials, "no Ray worker is running a trial"
    assert trials <= set(process_table.marked("OMP_WAIT_POLICY", "PASSIVE"))
    ray = snapshot(cli.marker)
    check_private(ray)
    check_refused(*attack(ray.gcs_address, cli.marker, tmp_path / "attacker"))
    updates = next((tmp_path / "runs").rglob("updates.csv"))
    done = len(updates.read_text().splitlines())
    while len(updates.read_text().splitlines()) <= done:  # the event: an update after the attack
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no update after the attack within 600 s"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)  # the driver alone, as a job scheduler sends it
    out, err = process.communicate(timeout=600)
    assert process.returncode == 130, err[-3000:]
    # Stopped as a person's Ctrl-C stops a run (experiments/ray_tasks.py), not killed: the trial
    # ended its update, checkpointed and wrote its summary, so it goes on from there.
    [summary] = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("summary.json")]  # --max-concurrent 1
    assert (summary["status"], summary["checkpoint"] is not None) == ("interrupted", True), summary
    assert summary["updates"] >= done and Path(summary["checkpoint"]).exists()
    # The results CSV is written as at every other end, its path the last line, and the line before
    # it names the command that goes on: a stopped sweep once wrote none, so its trials' checkpoints
    # could not be gone on from (--resume takes the CSV's run uuids).
    csv_path = Path(out.splitlines()[-1])
    rows = {row["trial"]: row for row in csv.DictReader(csv_path.open())}
    assert (rows["1"]["status"], rows["1"]["run_uuid"], rows["2"]["status"]) == ("interrupted", summary["run_uuid"], ""), rows
    assert ("sweep interrupted: running trials were stopped (their last checkpoints are kept); go on with: "
            "python -m experiments.sweep --grid learning_rate=1e-4,3e-4 --updates 100000") in err
    assert err.rstrip().endswith(f"--data-dir {tmp_path / 'runs'} --resume {csv_path}"), err[-1000:]
    assert cli.leftovers() == []  # Ray's processes and the trial's workers are gone
    assert not ray.token_path.parent.exists()


# A trial as a Ray worker runs it (run_trial in a fresh process); with HOLD_FILE set, the first
# attempt, which holds when it would checkpoint update 2 (after update 1's checkpoint, if it makes
# one each update) until the test kills it, as a lost node or worker process ends it.
TRIAL = """
import json, os, sys, time
from pathlib import Path
from ppo.trainer import Trainer
if "HOLD_FILE" in os.environ:
    original, hold = Trainer.state_dict, Path(os.environ["HOLD_FILE"])
    def hold_at_update_2(self, live_values):
        if self.update == 2:
            hold.touch()
            while True:
                time.sleep(1)
        return original(self, live_values)
    Trainer.state_dict = hold_at_update_2
from experiments.ray_tasks import run_trial
print(json.dumps(run_trial(json.loads(sys.argv[1]), sys.argv[2])))
"""


def lost_trial(cli: Cli, tmp_path: Path, checkpoint_every: int) -> tuple[list[str], str, Path]:
    """A trial (3 updates) whose process is lost when it would checkpoint update 2: the command
    that runs it again as Ray would, its uuid and the folder it left."""
    overrides = {"learning_rate": 1e-4, "updates": 3, "worker_steps": 16, "n_workers": 1, "envs_per_worker": 2, "minibatches": 2,
                 "epochs": 1, "checkpoint_every": checkpoint_every, "torch_threads": 1, "data_dir": str(tmp_path / "runs")}
    run_uuid = uuid.uuid4().hex
    argv = [sys.executable, "-c", TRIAL, json.dumps(overrides), run_uuid]
    first = forked_run.popen(argv, cwd=REPO, env=dict(cli.env(), HOLD_FILE=str(tmp_path / "held")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_file(tmp_path / "held", first)
    first.kill()  # the trial's process is lost: no handler runs, summary.json still says running
    first.communicate()
    assert cli.leftovers() == []  # its game workers went with it
    (run_dir,) = (tmp_path / "runs" / "breakout").iterdir()
    assert run_dir.name == run_uuid and json.loads((run_dir / "summary.json").read_text())["status"] == "running"
    return argv, run_uuid, run_dir


def test_a_trial_that_ray_runs_again_resumes_its_own_run(cli, tmp_path: Path) -> None:
    """Ray runs a trial whose process was lost again, with the same arguments (--max-retries): the
    new attempt finds the run folder of the trial's uuid with a checkpoint and goes on from it."""
    argv, run_uuid, run_dir = lost_trial(cli, tmp_path, checkpoint_every=1)
    again = forked_run.run(argv, cwd=REPO, env=cli.env(), text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert result["resumed"] is True and result["exit_code"] == 0, result
    assert "resumed at update 1 of 3" in again.stderr, again.stderr[-3000:]
    assert (result["run_uuid"], result["status"], result["updates"], result["env_steps"]) == (run_uuid, "completed", 3, 3 * 32)
    assert list((tmp_path / "runs" / "breakout").iterdir()) == [run_dir]  # its own folder, no second run
    # Each update once: the lost attempt's update 2 (past the checkpoint) was dropped and done again.
    assert [row["update"] for row in read_updates(run_dir / "updates.csv")] == [1, 2, 3]
    assert cli.leftovers() == []


def test_a_trial_lost_before_its_first_checkpoint_starts_again_in_its_own_folder(cli, tmp_path: Path) -> None:
    """Lost before anything could be resumed (no checkpoint yet; a run.pid and the records of
    updates 1 and 2 left behind), a trial that Ray runs again starts over under its uuid, where
    labml's own check for a run.pid made every retry fail."""
    argv, run_uuid, run_dir = lost_trial(cli, tmp_path, checkpoint_every=100)
    assert (run_dir / "run.pid").exists() and not (run_dir / "checkpoints").exists()  # it would checkpoint at its end only
    assert [row["update"] for row in read_updates(run_dir / "updates.csv")] == [1, 2]

    again = forked_run.run(argv, cwd=REPO, env=cli.env(), text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert result["resumed"] is False and result["exit_code"] == 0, result
    assert (result["run_uuid"], result["status"], result["updates"], result["env_steps"]) == (run_uuid, "completed", 3, 3 * 32)
    assert list((tmp_path / "runs" / "breakout").iterdir()) == [run_dir]
    assert [row["update"] for row in read_updates(run_dir / "updates.csv")] == [1, 2, 3]  # the lost updates once
    assert cli.leftovers() == []


def test_a_lost_trial_s_folder_is_left_alone_while_a_process_runs_it_or_when_it_holds_a_link(tmp_path: Path) -> None:
    run_dir = tmp_path / "breakout" / uuid.uuid4().hex
    run_dir.mkdir(parents=True)
    (run_dir / "run.pid").write_text(str(os.getpid()))  # a live process: this one
    with pytest.raises(UnsafeRunFolder, match="^" + re.escape(f"run folder {run_dir}: process {os.getpid()} still runs it, so the trial")):
        RunFolder(run_dir, run_dir.name).remove_lost_start()
    (run_dir / "run.pid").unlink()
    (run_dir / "games.csv").symlink_to(tmp_path / "elsewhere.csv")
    with pytest.raises(UnsafeRunFolder, match=re.escape(f"{run_dir / 'games.csv'} is a symbolic link")):
        RunFolder(run_dir, run_dir.name).remove_lost_start()
    assert sorted(p.name for p in run_dir.iterdir()) == ["games.csv"]  # nothing removed
    (run_dir / "games.csv").unlink()
    RunFolder(run_dir, run_dir.name).remove_lost_start()
    assert not run_dir.exists()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return b""


def _args(**values) -> argparse.Namespace:
    base = {"config": None, "grid": [], "random": [], "samples": None, "sweep_seed": None}
    return argparse.Namespace(**{**base, **values})


def test_grid_times_samples_with_seeded_random_draws() -> None:
    space, fixed = search_space(_args(grid=["clip_range=0.1,0.2", "epochs=3,4"], random=["learning_rate=loguniform:1e-5:1e-3"],
                                      samples=2, sweep_seed=7))
    trials = space.trials()
    assert fixed == {} and len(trials) == 2 * 2 * 2
    assert {(t["clip_range"], t["epochs"]) for t in trials} == {(0.1, 3), (0.1, 4), (0.2, 3), (0.2, 4)}
    assert all(1e-5 <= t["learning_rate"] <= 1e-3 and isinstance(t["epochs"], int) for t in trials)
    assert len({t["learning_rate"] for t in trials}) == len(trials)  # a fresh draw per trial
    assert trials == space.trials()  # same sweep seed, same trials


def test_yaml_and_command_line_combine(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("grid:\n  epochs: [2, 3]\nrandom:\n  entropy_coef: uniform:0.001:0.02\nsamples: 3\nfixed:\n  updates: 5\n")
    space, fixed = search_space(_args(config=str(spec), grid=["entropy_coef=0.01"]))
    assert fixed == {"updates": 5} and space.samples == 3
    assert space.grid == {"epochs": [2, 3], "entropy_coef": [0.01]} and space.random == {}  # the command line wins


def test_sorted_by_final_score_best_first_unscored_last() -> None:
    rows = [TrialRow(trial, "0" * 32, {}, score=score) for trial, score in [(1, None), (2, 3.5), (3, 12.0), (4, 0.0)]]
    assert [r.trial for r in sorted_rows(rows)] == [3, 2, 4, 1]


@pytest.mark.parametrize(("text", "message"), [
    ("learning_rate=normal:0:1", "expected one of uniform:…"),
    ("learning_rate=loguniform:0:1", "LOW > 0"),
    ("learning_rate=uniform:1:x", "with numbers"),
    ("epochs=choice:", "expected choice:A,B"),
])
def test_bad_distributions_are_refused(text: str, message: str) -> None:
    name, _, spec = text.partition("=")
    with pytest.raises(SweepError, match=message):
        parse_distribution(name, spec)


def test_seeded_space_without_parameters_is_empty_grid() -> None:
    assert SearchSpace({"seed": [0, 1]}, {}, 1, 0).trials() == [{"seed": 0}, {"seed": 1}]


@pytest.mark.parametrize(("args", "expected"), [
    ([], "error: nothing to sweep: give --grid NAME=V1,V2"),
    (["--grid", "no_such=1,2"], "error: --grid no_such=1,2: expected the name of a hyperparameter ('no_such' is none) "
                                "(see python -m experiments.breakout --help)"),
    # A misspelt name gets the nearest, as a misspelt option does (issue 71).
    (["--grid", "learnin_rate=1e-4,2e-4"], "error: --grid learnin_rate=1e-4,2e-4: expected the name of a hyperparameter "
                                           "('learnin_rate' is none); did you mean learning_rate?"),
    (["--random", "entropy_cof=uniform:0:0.1"], "error: --random entropy_cof=uniform:0:0.1: expected the name of a "
                                                "hyperparameter ('entropy_cof' is none); did you mean entropy_coef?"),
    (["--grid", "epochs=2,x"], "error: epochs=x: expected an integer"),
    (["--grid", "learning_rate"], "error: --grid learning_rate: expected NAME=VALUE"),
    (["--grid", "epochs=2,100"], "error: --epochs 100: expected a value in [1, 32]"),
    (["--grid", "epochs=2", "--samples", "0"], "error: --samples 0: expected an integer from 1 to 10_000"),
    (["--grid", "epochs=2", "--cpus-per-trial", "0"], "error: --cpus-per-trial 0: expected a number > 0 and ≤ 1024"),
    (["--grid", "epochs=2", "--ray-address", "nowhere"], "error: --ray-address nowhere: expected auto, HOST:PORT"),
    (["--grid", "epochs=2", "--config", "/no/such.yaml"], "error: --config /no/such.yaml: No such file or directory"),
    (["--grid", "epochs=2", "--n-workers", "0"], "error: --n-workers 0: expected an integer from 1 to 4_096"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--data-dir", str(tmp_path / "runs")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(expected), err
    assert not (tmp_path / "runs").exists()
