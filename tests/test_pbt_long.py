"""`python -m experiments.pbt`: a real population of 2 on a local Ray in a long first segment, in
which a person tweaks member 0 by hand, member 1's process is killed and comes back, and a SIGTERM
to the driver stops it with every member checkpointed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
import yaml

from dashboard.client import DashboardError, get_hyperparams
from experiments.run.folders import RunFolder
from ppo.checkpoint import read_checkpoint
from ray_setup.installed import ray_installed
from tests import forked_run
from tests.conftest import REPO, Cli
from tests.pbt_support import TINY, rows_of, run_dir_of, stop_for_good, wait_for

UPDATES = 10_000  # a checkpoint each: the first segment (5,000 updates) outlasts the test by far
LONG = [*TINY[:TINY.index("--total-env-steps")], "--total-env-steps", str(32 * UPDATES), "--epochs", "1", "--minibatches", "2",
        "--checkpoint-every", "1"]
HAND_LR = 1e-4


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
    # Forked from the zygote (its imports done once), in a session of its own as a service's would be.
    process = forked_run.popen(args, cwd=REPO, env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        state_file = wait_for(lambda: next(data.glob("breakout/pbt-*/population.json"), None), process, "population.json")
        state = json.loads(state_file.read_text())
        run_dirs = wait_for(lambda: all(d := [run_dir_of(data, m["run_uuid"]) for m in state["members"]]) and d, process, "run folders")
        updates = [d / "updates.csv" for d in run_dirs]
        wait_for(lambda: all(u.exists() and rows_of(u) for u in updates), process, "a first update of each member")
        # Member 1 killed first, so that its new process starts while member 0 is tweaked (the two
        # members' stories are apart: one's tweak, the other's kill); once it has a checkpoint to go on from.
        wait_for(lambda: RunFolder.at(run_dirs[1]).newest_checkpoint.exists(), process, "member 1's first checkpoint")
        killed = RunFolder(run_dirs[1], run_dirs[1].name).check()
        assert killed is not None
        last_before = int(rows_of(updates[1])[-1]["update"])
        os.kill(killed, signal.SIGKILL)
        # As a person would: once the dashboard shows member 0 running (it has reported its values).
        url, member_0 = state["fixed"]["dashboard"], state["members"][0]["run_uuid"]
        wait_for(lambda: reported(url, member_0), process, "member 0 running on the dashboard")
        tweak = cli.run("experiments.tweak", member_0, f"learning_rate={HAND_LR}", "--dashboard", url)
        # In use: member 0's updates.csv shows the hand-set base, annealed over the run's updates.
        wait_for(lambda: any(float(r["learning_rate"]) == pytest.approx(HAND_LR * (1 - (int(r["update"]) - 1) / UPDATES))
                             for r in rows_of(updates[0])), process, "the hand-set learning rate in member 0's updates.csv")
        wait_for(lambda: RunFolder(run_dirs[1], run_dirs[1].name).check() not in (None, killed) and int(rows_of(updates[1])[-1]["update"]) > last_before,
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
def test_each_member_is_named_by_its_population_and_number(tweaked_killed_stopped: dict[str, Any]) -> None:
    # labml's comment, which the dashboard lists beside the run; member 1's too after its process came back.
    folder = tweaked_killed_stopped["folder"]
    for member, run_dir in enumerate(tweaked_killed_stopped["run_dirs"]):
        assert yaml.safe_load((run_dir / "run.yaml").read_text())["comment"] == f"population {folder.name} member {member}"
