"""`python -m experiments.pbt`: a real population of 2 on a local Ray, stopped by a Ctrl-C to its
process group in its first segment and resumed to the end.

One population (module fixture) serves every assertion: 2 members of 6 updates of 2 games × 16
steps each, in the trainer's process (--backend serial), an exploit after update 3. No game ends
that soon, so the ranking falls back to member order: member 0 is the best, member 1 copies it.
The same population run through without a stop, the reference the resume must reproduce, is the
session's finished population (tests/conftest.py), made once for these tests and for the attacks
on copies of it (tests/test_attacks_population.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import torch

from configs.ppo import live_value_problem
from experiments.curves import parse_runs
from experiments.pbt.cli import exploit_and_explore
from experiments.pbt.explore import changes_text
from experiments.pbt.population import Population
from experiments.run.updates_csv import read_updates
from ppo.checkpoint import read_checkpoint
from ray_setup.installed import ray_installed
from tests import forked_run
from tests.conftest import REPO, Cli
from tests.pbt_support import POPULATION, changes_of, checkpoints, rows_of, run_dir_of, wait_for
from tests.ray_checks import check_private, snapshot

# `python -c HELD_MEMBERS ARGS…`: `python -m experiments.pbt ARGS…` whose members each hold when
# they checkpoint update 1, touching HOLD_DIR/<pid>, until their run is asked to stop; they then
# checkpoint and stop as they would have. So the test's Ctrl-C lands while every member trains,
# whatever the machine's load. Defined in __main__, so Ray sends the wrapper to the members'
# workers by value. It starts the population with SIGINT ignored, as `cmd &` in a script does (and a
# test session started that way did): the Ctrl-C must stop it all the same.
HELD_MEMBERS = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job (`cmd &`) starts: Python sets no handler
import experiments.pbt.population as population
def held(run_member):
    def held_member(*args, **kwargs):
        import os, time
        from pathlib import Path
        from ppo.trainer import Trainer
        original = Trainer.state_dict
        def state_dict_then_hold(self, live_values):
            state = original(self, live_values)
            hold = Path(os.environ["HOLD_DIR"]) / str(os.getpid())
            if self.update == 1 and not hold.exists():
                hold.touch()
                while not self.should_stop():
                    time.sleep(0.01)
            return state
        Trainer.state_dict = state_dict_then_hold
        return run_member(*args, **kwargs)
    return held_member
population.run_member = held(population.run_member)
from experiments.pbt.cli import main
sys.exit(main())
"""


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    data = tmp_path_factory.mktemp("pbt") / "runs"
    held = tmp_path_factory.mktemp("held")
    cli = Cli()
    args = [sys.executable, "-c", HELD_MEMBERS, *POPULATION, "--data-dir", str(data)]
    # A session of its own, so that a signal to its process group is what a Ctrl-C in its terminal sends.
    first = forked_run.popen(args, cwd=REPO, env=dict(cli.env(), HOLD_DIR=str(held)), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        return run_population(first, data, held, cli)
    finally:  # a failed wait above must not leave the population running, nor its dashboard (a session of its own)
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
            cli.kill_leftovers()


def run_population(first: subprocess.Popen[str], data: Path, held: Path, cli: Cli) -> dict[str, Any]:
    state_file = wait_for(lambda: next(data.glob("breakout/pbt-*/population.json"), None), first, "population.json")
    state = json.loads(state_file.read_text())
    run_dirs = wait_for(lambda: all(d := [run_dir_of(data, m["run_uuid"]) for m in state["members"]]) and d, first, "run folders")
    # Both members are training when the Ctrl-C comes: each holds at its first checkpoint until asked to stop.
    wait_for(lambda: len(list(held.iterdir())) == 2, first, "both members held at their first checkpoint")
    assert all(len(rows_of(d / "updates.csv")) == 1 for d in run_dirs)
    ray = snapshot(cli.marker)  # the driver, its Ray, the members, the private dashboard, all running
    os.killpg(first.pid, signal.SIGINT)
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
    record = json.loads((population["folder"] / "population.json").read_text())
    assert record["generation"] == 2
    # Its own dashboard and Ray in both legs: the first leg's recorded, and no line on a change.
    assert record["first_leg"] == {"dashboard": None, "ray_address": None}
    assert not [line for line in resumed.stderr.splitlines() if line.startswith("note: ")], resumed.stderr[-3000:]
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


TIMING = ("sps", "sample_sps", "update_sps")  # wall-clock rates: the one thing a stop may change


@pytest.mark.ray
@pytest.mark.slow
def test_a_resumed_population_continues_exactly_as_one_never_stopped(population: dict[str, Any],
                                                                     finished_population: dict[str, Any]) -> None:
    uninterrupted = finished_population  # the same options and seeds, run through without a stop
    assert uninterrupted["stdout"].strip().splitlines()[-1] == str(uninterrupted["folder"] / "lineage.csv")
    assert uninterrupted["leftovers"] == []
    def learned(rows: list[dict[str, str]]) -> list[dict[str, str]]:  # not where it ran: each population had a Ray of its own
        return [{k: v for k, v in row.items() if k not in ("node_id", "donor_node_id")} for row in rows]

    assert learned(rows_of(population["folder"] / "lineage.csv")) == learned(rows_of(uninterrupted["folder"] / "lineage.csv"))
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
