"""`python -m experiments.pbt`: a real population of 2 on a local Ray, stopped by a Ctrl-C to its
process group in its first segment and resumed to the end; its input checks.

One population (module fixture) serves every assertion: 2 members of 6 updates of 2 games × 16
steps each, in the trainer's process (--backend serial), an exploit after update 3. No game ends
that soon, so the ranking falls back to member order: member 0 is the best, member 1 copies it.
The same population run through without a stop, the reference the resume must reproduce, runs
alongside the stop and the resume (from the Ctrl-C on, so that it adds no load while the stop is timed): the two
share nothing but the machine, and each spends much of its time waiting on its own Ray start and
member processes.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import torch

from configs.ppo import live_value_problem
from dashboard.client import DashboardError, get_hyperparams
from experiments.curves import parse_runs
from experiments.pbt import main
from experiments.pbt.cli import exploit_and_explore
from experiments.pbt.explore import changes_text, perturbed
from experiments.pbt.population import Population
from experiments.run.folders import find_run, running_pid
from experiments.run.updates_csv import read_updates
from game.vector.ray_actors import ray_installed
from ppo.checkpoint import read_checkpoint
from tests.conftest import REPO, Cli
from tests.ray_checks import check_private, snapshot

TINY = ["--worker-steps", "16", "--n-workers", "1", "--envs-per-worker", "2", "--backend", "serial",
        "--total-env-steps", "192", "--epochs", "1", "--minibatches", "2"]  # 6 updates of 32 agent steps


def rows_of(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def changes_of(row: dict[str, str]) -> dict[str, float]:
    return {name: float(value) for name, value in (pair.split("=") for pair in row["changes"].split())}


def wait_for(condition: Any, process: subprocess.Popen[str], what: str, timeout_s: float = 600) -> Any:
    """Until `condition()` is truthy (returned); fails at once if the population ends first."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert process.poll() is None, f"the population ended first ({what}):\n{process.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.05)
    return value


class WholeRun:
    """The fixture's population (same options, same seeds) run through without a stop, in the
    background from `start()` on; its output goes to files, so that nothing must read a pipe meanwhile."""

    def __init__(self, root: Path) -> None:
        self.root, self.cli = root, Cli()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        if self.process is None:
            args = [sys.executable, "-m", "experiments.pbt", "--population", "2", "--interval", "3", *TINY,
                    "--data-dir", str(self.root / "runs")]
            with (self.root / "stdout").open("w") as out, (self.root / "stderr").open("w") as err:
                self.process = subprocess.Popen(args, cwd=REPO, env=self.cli.env(), stdout=out, stderr=err, text=True,
                                                start_new_session=True)
        return self.process


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WholeRun]:
    whole = WholeRun(tmp_path_factory.mktemp("pbt-whole"))
    try:
        yield whole
    finally:  # one that no test waited for (or that a test gave up on) must not be left running
        if whole.process is not None:
            stop_for_good(whole.process, whole.cli)


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory, whole_run: WholeRun) -> dict[str, Any]:
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    data = tmp_path_factory.mktemp("pbt") / "runs"
    cli = Cli()
    args = [sys.executable, "-m", "experiments.pbt", "--population", "2", "--interval", "3", *TINY, "--data-dir", str(data)]
    # A session of its own, so that a signal to its process group is what a Ctrl-C in its terminal sends.
    first = subprocess.Popen(args, cwd=REPO, env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        return run_population(first, data, cli, whole_run)
    finally:  # a failed wait above must not leave the population running
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()


def run_population(first: subprocess.Popen[str], data: Path, cli: Cli, whole_run: WholeRun) -> dict[str, Any]:
    state_file = wait_for(lambda: next(data.glob("breakout/pbt-*/population.json"), None), first, "population.json")
    state = json.loads(state_file.read_text())
    run_dirs = wait_for(lambda: all(d := [find_run(data, m["run_uuid"]) for m in state["members"]]) and d, first, "run folders")
    # Both members are training (each has finished an update) when the Ctrl-C comes.
    wait_for(lambda: all((d / "updates.csv").exists() and len(rows_of(d / "updates.csv")) >= 1 for d in run_dirs),
             first, "a first update of each member")
    ray = snapshot(cli.marker)  # the driver, its Ray, the members, the private dashboard, all running
    os.killpg(first.pid, signal.SIGINT)
    whole_run.start()
    out, err = first.communicate(timeout=600)
    interrupted = {"code": first.returncode, "stdout": out, "stderr": err, "leftovers": cli.leftovers(),
                   "checkpoints": [(d / "checkpoints" / "checkpoint.pt").exists() for d in run_dirs]}
    resumed = cli.run("experiments.pbt", "--resume", str(state_file.parent), timeout=600)
    return {"interrupted": interrupted, "resumed": resumed, "leftovers": cli.leftovers(), "folder": state_file.parent,
            "run_dirs": run_dirs, "members": state["members"], "ray": ray,
            "dashboard": state["fixed"]["dashboard"]}




@pytest.mark.ray
@pytest.mark.slow
def test_ctrl_c_stops_every_member_with_a_checkpoint_and_leaves_nothing(population: dict[str, Any]) -> None:
    first = population["interrupted"]
    assert first["code"] == 130, first["stderr"][-3000:]
    assert "go on with: python -m experiments.pbt --resume" in first["stderr"]
    assert first["stdout"].strip().splitlines()[-1] == str(population["folder"] / "lineage.csv")
    # The members' comparison page on the private dashboard, while it runs (it stops with the population).
    members = ",".join(m["run_uuid"] for m in population["members"])
    assert re.search(rf"^  compare the 2 members on the dashboard: http://127\.0\.0\.1:\d+/compare\?runs={members}$",
                     first["stderr"], re.MULTILINE), first["stderr"][:3000]
    assert first["checkpoints"] == [True, True]
    assert first["leftovers"] == []  # no Ray process, no member, no dashboard


@pytest.mark.ray
@pytest.mark.slow
def test_the_resumed_population_ends_every_member_at_its_last_update(population: dict[str, Any]) -> None:
    resumed = population["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.strip().splitlines()[-1] == str(population["folder"] / "lineage.csv")
    for run_dir in population["run_dirs"]:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["status"], summary["updates"], summary["env_steps"]) == ("completed", 6, 192)
        # Each update once, in order: the interrupted segment went on from its checkpoint.
        assert [int(r["update"]) for r in rows_of(run_dir / "updates.csv")] == [1, 2, 3, 4, 5, 6]
    assert json.loads((population["folder"] / "population.json").read_text())["generation"] == 2
    assert (population["folder"] / "lineage.png").read_bytes()[:4] == b"\x89PNG"
    assert population["leftovers"] == []


@pytest.mark.ray
@pytest.mark.slow
def test_a_running_populations_processes_listen_on_loopback_only_with_a_private_token(population: dict[str, Any]) -> None:
    """Read from the process table while both members trained: Ray's daemons and workers, the
    members and the population's own dashboard; the token file gone once the population stopped."""
    ray = population["ray"]
    check_private(ray)
    port = urlsplit(population["dashboard"]).port
    assert any(port == p for _, sockets in ray.sockets.values() for _, p in sockets)  # the dashboard was seen too
    assert not ray.token_path.parent.exists()


@pytest.mark.ray
@pytest.mark.slow
def test_curves_reads_a_population_as_its_members_runs(population: dict[str, Any]) -> None:
    groups = parse_runs([f"pbt={population['folder']}", f"glob={population['folder'].parent}/pbt-*"])
    assert groups == {"pbt": population["run_dirs"], "glob": population["run_dirs"]}


def checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    return [torch.load(p, map_location="cpu", weights_only=False) for p in sorted((run_dir / "checkpoints").glob("checkpoint*.pt"))]


@pytest.mark.ray
@pytest.mark.slow
def test_member_1_copies_member_0s_learner_and_keeps_its_own_games(population: dict[str, Any]) -> None:
    lineage = rows_of(population["folder"] / "lineage.csv")
    assert [(r["update"], r["member"], r["copied_from"]) for r in lineage] == [("3", "1", "0")]
    said = population["interrupted"]["stderr"] + population["resumed"].stderr
    assert ("member 1 (no game ended yet) takes member 0's weights, Adam state and schedule position (no game ended "
            "yet) at update 3, keeps its own games and seeds; its live values become " + lineage[0]["changes"]) in said, said
    donor = next(c for c in checkpoints(population["run_dirs"][0]) if c["update"] == 3)
    at_2 = [c for c in checkpoints(population["run_dirs"][1]) if c["update"] == 3]
    copied = [c for c in at_2 if all(torch.equal(v, donor["model"][k]) for k, v in c["model"].items())]
    own = [c for c in at_2 if not any(c is x for x in copied)]
    assert len(copied) == 1 and len(own) == 1, "member 1 keeps its own update-3 checkpoint and the copy"
    assert copied[0]["optimizer"]["state"][0]["step"] == donor["optimizer"]["state"][0]["step"]
    assert torch.equal(copied[0]["optimizer"]["state"][0]["exp_avg"], donor["optimizer"]["state"][0]["exp_avg"])
    for key in ("env_states", "shuffle_rng", "sample_generator", "games", "scores"):  # its own games and random streams
        assert repr(copied[0][key]) == repr(own[0][key]), key
    assert repr(copied[0]["env_states"]) != repr(donor["env_states"])
    # Its live values: its own, but for the explored ones, the donor's perturbed (the lineage's changes).
    assert copied[0]["live_values"] == pytest.approx({**own[0]["live_values"], **changes_of(lineage[0])})


@pytest.mark.ray
@pytest.mark.slow
def test_explored_values_are_in_range_and_in_use_from_the_next_update(population: dict[str, Any]) -> None:
    (row,) = rows_of(population["folder"] / "lineage.csv")
    changes = changes_of(row)
    assert sorted(changes) == ["clip_range", "epochs", "learning_rate"]
    # The population's own values (defaults, but --epochs 1) times 0.8 or 1.2; an integer moves by at
    # least 1 and stays ≥ 1, so epochs 1 becomes 1 (× 0.8) or 2 (× 1.2).
    assert changes["learning_rate"] in (pytest.approx(2.5e-4 * 0.8), pytest.approx(2.5e-4 * 1.2))
    assert changes["clip_range"] in (pytest.approx(0.1 * 0.8), pytest.approx(0.1 * 1.2))
    assert changes["epochs"] in (1, 2)
    assert all(live_value_problem(name, value) is None for name, value in changes.items())
    # In use by member 1 from the update after the exploit: its updates.csv shows the new bases
    # annealed over 6 updates (update u uses base × (1 − (u − 1)/6)).
    old = {"learning_rate": 2.5e-4, "clip_range": 0.1, "epochs": 1}
    used = []
    for r in rows_of(population["run_dirs"][1] / "updates.csv"):
        remaining = 1 - (int(r["update"]) - 1) / 6
        bases = changes if float(r["learning_rate"]) == pytest.approx(changes["learning_rate"] * remaining) else old
        assert float(r["learning_rate"]) == pytest.approx(bases["learning_rate"] * remaining)
        assert float(r["clip_range"]) == pytest.approx(bases["clip_range"] * remaining)
        assert float(r["epochs_done"]) == bases["epochs"]
        used.append(bases is changes)
    # Old values up to the exploit at update 3, the new ones from the next update on (they travel in
    # the copied checkpoint too, so their first update does not depend on the channel's timing).
    assert used == [False, False, False, True, True, True]
    final_1 = next(c for c in checkpoints(population["run_dirs"][1]) if c["update"] == 6)
    assert final_1["live_values"] == pytest.approx({**final_1["live_values"], **changes})


@pytest.mark.parametrize(("values", "low", "high"), [
    ({"learning_rate": 1e-2, "clip_range": 1.0, "epochs": 32}, {"learning_rate": 0.008, "clip_range": 0.8, "epochs": 26},
     {"learning_rate": 1e-2, "clip_range": 1.0, "epochs": 32}),  # at the top of each range: × 1.2 stays there
    ({"learning_rate": 0.0, "clip_range": 0.05, "epochs": 1}, {"learning_rate": 0.0, "clip_range": 0.04, "epochs": 1},
     {"learning_rate": 0.0, "clip_range": 0.06, "epochs": 2}),  # an integer moves by at least 1, never below 1
])
def test_explore_stays_in_the_configs_ranges(values: dict[str, Any], low: dict[str, Any], high: dict[str, Any]) -> None:
    seen = [perturbed(values, list(values), np.random.default_rng(seed)) for seed in range(40)]
    for name in values:
        assert {s[name] for s in seen} == {low[name], high[name]}, name  # both factors drawn, each clipped
        assert all(live_value_problem(name, s[name]) is None for s in seen)


@pytest.mark.parametrize(("args", "message"), [
    (["--population", "1", "--interval", "2"], "--population 1: expected an integer from 2 to 1_024"),
    (["--population", "1025", "--interval", "2"], "--population 1025: expected an integer from 2 to 1_024"),
    (["--interval", "2"], "--population: expected an integer from 2 to 1_024, none given"),
    (["--population", "2"], "--interval: expected a number of updates, none given"),
    (["--population", "2", "--interval", "2", "--cpus-per-member", "nan"], "--cpus-per-member nan: expected a number > 0"),
    (["--population", "2", "--interval", "2", "--cpus-per-member", "0"], "--cpus-per-member 0: expected a number > 0"),
    (["--population", "2", "--interval", "2", "--max-retries", "-1"], "--max-retries -1: expected an integer from 0 to 100"),
    (["--population", "2", "--interval", "0"], "--interval 0: expected an integer from 1 to 1_000_000_000"),
    (["--population", "2", "--interval", "6"], "--interval 6: expected an integer from 1 to 5"),
    (["--population", "2", "--interval", "2", "--explore", "gamma"], "--explore gamma: expected distinct live"),
    (["--resume", "/nonexistent/pbt-x"], "--resume /nonexistent/pbt-x: expected a population folder (one holding population.json)"),
])
def test_bad_population_or_interval_is_one_line_before_ray_starts(args: list[str], message: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*args, *TINY, "--data-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


@pytest.fixture(scope="module")
def uninterrupted(whole_run: WholeRun) -> dict[str, Any]:
    """The fixture's population (same options, same seeds) run through without a stop."""
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    process, root, cli = whole_run.start(), whole_run.root, whole_run.cli  # started already by `population`
    code = process.wait(timeout=600)
    result = subprocess.CompletedProcess(process.args, code, (root / "stdout").read_text(), (root / "stderr").read_text())
    assert result.returncode == 0, result.stderr[-3000:]
    data = root / "runs"
    folder = Path(result.stdout.strip().splitlines()[-1]).parent
    members = json.loads((folder / "population.json").read_text())["members"]
    return {"result": result, "folder": folder, "run_dirs": [find_run(data, m["run_uuid"]) for m in members],
            "leftovers": cli.leftovers()}


TIMING = ("sps", "sample_sps", "update_sps")  # wall-clock rates: the one thing a stop may change


@pytest.mark.ray
@pytest.mark.slow
def test_a_resumed_population_continues_exactly_as_one_never_stopped(population: dict[str, Any],
                                                                     uninterrupted: dict[str, Any]) -> None:
    assert uninterrupted["result"].stdout.strip().splitlines()[-1] == str(uninterrupted["folder"] / "lineage.csv")
    assert uninterrupted["leftovers"] == []
    assert rows_of(population["folder"] / "lineage.csv") == rows_of(uninterrupted["folder"] / "lineage.csv")
    for stopped_dir, whole_dir in zip(population["run_dirs"], uninterrupted["run_dirs"], strict=True):
        stopped, whole = (read_checkpoint(d / "checkpoints" / "checkpoint.pt") for d in (stopped_dir, whole_dir))
        assert stopped.update == whole.update == 6
        assert all(torch.equal(stopped.model[k], whole.model[k]) for k in whole.model)
        assert all(torch.equal(a, b) for a, b in zip(stopped.optimizer["state"][0].values(),
                                                     whole.optimizer["state"][0].values(), strict=True))
        assert repr(stopped.env_states) == repr(whole.env_states) and stopped.live_values == whole.live_values
        assert torch.equal(stopped.sample_generator, whole.sample_generator) and stopped.shuffle_rng == whole.shuffle_rng
        rows = [[{k: v for k, v in r.items() if k not in TIMING} for r in read_updates(d / "updates.csv")]
                for d in (stopped_dir, whole_dir)]
        assert rows[0] == rows[1]  # every loss, KL, clip fraction and value used, update by update


UPDATES = 10_000  # a checkpoint each: the first segment (5,000 updates) outlasts the test by far
LONG = [*TINY[:TINY.index("--total-env-steps")], "--total-env-steps", str(32 * UPDATES), "--epochs", "1", "--minibatches", "2",
        "--checkpoint-every", "1"]
HAND_LR = 1e-4


def stop_for_good(process: subprocess.Popen[str], cli: Cli) -> None:
    """A population a test gave up on: a Ctrl-C to its group, then SIGKILL, then any process of its
    left behind (a killed driver cannot stop its dashboard), each by its pid."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    for pid in cli.leftovers():
        os.kill(pid, signal.SIGKILL)


def reported(dashboard: str, run_uuid: str) -> bool:
    """Whether the dashboard has the run's own report of its live values (it is running there)."""
    try:
        param = get_hyperparams(dashboard, run_uuid)["params"].get("learning_rate")  # absent before its configs
    except DashboardError:  # not known there yet
        return False
    return param is not None and param["applied"] is not None


@pytest.fixture(scope="module")
def tweaked_killed_stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A population of 2 in a long first segment (the test stops it long before its end): a person tweaks member 0 with experiments.tweak,
    member 1's process is killed (kill -9) and comes back, then a SIGTERM to the driver."""
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    data = tmp_path_factory.mktemp("pbt-long") / "runs"
    cli = Cli()
    args = [sys.executable, "-m", "experiments.pbt", "--population", "2", "--interval", str(UPDATES // 2), *LONG, "--data-dir", str(data)]
    process = subprocess.Popen(args, cwd=REPO, env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        state_file = wait_for(lambda: next(data.glob("breakout/pbt-*/population.json"), None), process, "population.json")
        state = json.loads(state_file.read_text())
        run_dirs = wait_for(lambda: all(d := [find_run(data, m["run_uuid"]) for m in state["members"]]) and d, process, "run folders")
        updates = [d / "updates.csv" for d in run_dirs]
        wait_for(lambda: all(u.exists() and rows_of(u) for u in updates), process, "a first update of each member")
        # As a person would: once the dashboard shows member 0 running (it has reported its values).
        url, member_0 = state["fixed"]["dashboard"], state["members"][0]["run_uuid"]
        wait_for(lambda: reported(url, member_0), process, "member 0 running on the dashboard")
        tweak = cli.run("experiments.tweak", member_0, f"learning_rate={HAND_LR}", "--dashboard", url)
        # In use: member 0's updates.csv shows the hand-set base, annealed over 1,000 updates.
        wait_for(lambda: any(float(r["learning_rate"]) == pytest.approx(HAND_LR * (1 - (int(r["update"]) - 1) / UPDATES))
                             for r in rows_of(updates[0])), process, "the hand-set learning rate in member 0's updates.csv")
        killed = running_pid(run_dirs[1])
        assert killed is not None
        last_before = int(rows_of(updates[1])[-1]["update"])
        os.kill(killed, signal.SIGKILL)
        wait_for(lambda: running_pid(run_dirs[1]) not in (None, killed) and int(rows_of(updates[1])[-1]["update"]) > last_before,
                 process, "member 1 training again after its kill")
        process.terminate()  # SIGTERM to the driver alone, as `kill PID` or a service manager sends
        out, err = process.communicate(timeout=600)
        leftovers = cli.leftovers()  # before the clean-up below, which kills any
    finally:  # a failed wait above must leave nothing running: the population's own stop first
        stop_for_good(process, cli)
    return {"code": process.returncode, "stdout": out, "stderr": err, "tweak": tweak, "killed": killed,
            "folder": state_file.parent, "run_dirs": run_dirs, "leftovers": leftovers, "dashboard": url}


@pytest.mark.ray
@pytest.mark.slow
def test_a_person_tweaks_a_member_by_hand_while_the_population_runs(tweaked_killed_stopped: dict[str, Any]) -> None:
    # The command the population prints for it, with its private dashboard's address (the one the tweak used);
    # and not Ray's notice about the token of the private Ray instance, which asks nothing of the person.
    err = tweaked_killed_stopped["stderr"]
    assert ("  tweak a member by hand (while the population runs: its dashboard ends with it): python -m experiments.tweak "
            f"--dashboard {tweaked_killed_stopped['dashboard']} RUN_UUID NAME=VALUE\n") in err, err[:3000]
    assert "Token authentication" not in err
    tweak = tweaked_killed_stopped["tweak"]
    assert tweak.returncode == 0, tweak.stderr
    member_0 = tweaked_killed_stopped["run_dirs"][0]
    used = [(int(r["update"]), float(r["learning_rate"]) / (1 - (int(r["update"]) - 1) / UPDATES))
            for r in rows_of(member_0 / "updates.csv")]
    # Its own value, then the hand-set one from some update on, to the end.
    switch = next(i for i, (_, base) in enumerate(used) if base == pytest.approx(HAND_LR))
    assert switch >= 1 and all(base == pytest.approx(2.5e-4) for _, base in used[:switch])
    assert all(base == pytest.approx(HAND_LR) for _, base in used[switch:])
    assert read_checkpoint(member_0 / "checkpoints" / "checkpoint.pt").live_values["learning_rate"] == pytest.approx(HAND_LR)


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_member_is_run_again_from_its_last_checkpoint(tweaked_killed_stopped: dict[str, Any]) -> None:
    member_1 = tweaked_killed_stopped["run_dirs"][1]
    numbers = [int(r["update"]) for r in rows_of(member_1 / "updates.csv")]
    assert numbers == list(range(1, len(numbers) + 1))  # each update once: the kill's lost update done again
    assert "failed" not in tweaked_killed_stopped["stderr"], tweaked_killed_stopped["stderr"][-3000:]


@pytest.mark.ray
@pytest.mark.slow
def test_a_sigterm_in_a_long_segment_checkpoints_every_member_at_its_last_update(tweaked_killed_stopped: dict[str, Any]) -> None:
    assert tweaked_killed_stopped["code"] == 130, tweaked_killed_stopped["stderr"][-3000:]
    assert tweaked_killed_stopped["stdout"].strip().splitlines()[-1] == str(tweaked_killed_stopped["folder"] / "lineage.csv")
    for run_dir in tweaked_killed_stopped["run_dirs"]:
        last = int(rows_of(run_dir / "updates.csv")[-1]["update"])
        assert read_checkpoint(run_dir / "checkpoints" / "checkpoint.pt").update == last
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert tweaked_killed_stopped["leftovers"] == []  # no Ray process, member, worker or dashboard


@pytest.mark.ray
@pytest.mark.slow
def test_the_dashboard_hands_member_1_its_explored_values(population: dict[str, Any]) -> None:
    (row,) = rows_of(population["folder"] / "lineage.csv")
    store = json.loads((population["folder"] / "dashboard" / "hyperparams.json").read_text())
    assert store.get(population["members"][1]["run_uuid"], {}).get("delivered") == pytest.approx(changes_of(row))


@pytest.mark.ray
@pytest.mark.slow
def test_a_member_that_failed_is_replaced_by_the_best(population: dict[str, Any]) -> None:
    """Last in the file: it rewrites member 0's checkpoint. A member whose segment failed ranks last
    whatever its score and takes the best one's learner (here the dashboard is gone: the values
    are kept for the dashboard until the member's run runs again)."""
    state = Population.load(population["folder"])
    own = checkpoints(population["run_dirs"][0])
    rows = exploit_and_explore(state, 6, {0: "crashed: NonFiniteLoss", 1: None})
    assert [(r["update"], r["member"], r["copied_from"]) for r in rows] == [(6, 0, 1)]
    assert changes_text(state.unqueued["0"]) == rows[0]["changes"]  # for the dashboard once it runs again
    newest = torch.load(population["run_dirs"][0] / "checkpoints" / "checkpoint.pt", map_location="cpu", weights_only=False)
    donor = next(c for c in checkpoints(population["run_dirs"][1]) if c["update"] == 6)
    assert all(torch.equal(v, donor["model"][k]) for k, v in newest["model"].items())
    assert repr(newest["env_states"]) == repr(next(c for c in own if c["update"] == 6)["env_states"])


def test_version_and_help_name_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--version", "--help"):
        with pytest.raises(SystemExit) as exit_:
            main([flag], prog="breakout-ppo pbt")
        assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("breakout-ppo ") and "usage: breakout-ppo pbt [-h]" in out and "--population N" in out


def test_a_resumed_population_keeps_its_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "population.json").write_text("{}")
    for extra, option in ((["--interval", "5"], "--interval"), (["--learning-rate", "1e-3"], "--learning-rate")):
        with pytest.raises(SystemExit) as exit_:
            main(["--resume", str(tmp_path), *extra])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [f"error: {option}: a resumed population keeps its own settings "
                                            "(only --ray-address may be given with --resume)"], err
