"""Nodes lost under a sweep and a population on the shared real 3-node cluster (tests/cluster_support.py),
each at a known point: every trial or member is held in its Ray worker after its run's first
checkpoint (HELD_DRIVER) until the test has killed a node. Each test brings back the nodes an
earlier test lost first (tools/local_cluster.py's SIGUSR1), and checks that what it started left nothing.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import forked_run, process_table
from tests.cluster_support import TINY, LocalCluster, environ_of, started_cluster, wait_dead
from tests.conftest import MARK, REPO, Cli

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.cluster]

# `python -c HELD_DRIVER MODULE ARGS…`: MODULE's main(ARGS), its trials (a sweep's) or members' segments
# (a population's) held in their Ray worker after the first checkpoint of their run's first attempt:
# HOLD_DIR/<run uuid> appears (its text: the node's id), and the run waits for HOLD_DIR/<run uuid>.go.
# Each attempt that returns appends "<node id> <resumed>" to HOLD_DIR/<run uuid>.attempts. The
# wrappers are defined here, in __main__, so Ray sends them to the workers by value. A training run
# (MODULE experiments.breakout, its trainer in this process) holds likewise, until it has seen its
# cluster's head lost. With HOLD_SIGINT_IGNORED set, MODULE's main starts with SIGINT ignored.
HELD_DRIVER = """
import importlib, os, signal, sys
from pathlib import Path
HOLD_DIR = Path(os.environ["HOLD_DIR"])
if os.environ.get("HOLD_SIGINT_IGNORED"):  # as a script's background job (`cmd &`) starts: Python sets no SIGINT handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)
def held(call):
    def held_call(overrides, run_uuid, label=None):
        import time
        import ray
        from experiments.run import lifecycle
        hold, original, node = HOLD_DIR / run_uuid, lifecycle.TrainingRun._summary, ray.get_runtime_context().get_node_id()
        def summary_then_hold(self, trainer, leg, status=None):
            written = original(self, trainer, leg, status)
            if status == "running" and trainer.update >= 1 and not hold.exists():  # its start writes one too
                hold.with_suffix(".tmp").write_text(node)
                hold.with_suffix(".tmp").rename(hold)
                while not hold.with_suffix(".go").exists():
                    time.sleep(0.01)
            return written
        lifecycle.TrainingRun._summary = summary_then_hold
        result = call(overrides, run_uuid, label)
        with hold.with_suffix(".attempts").open("a") as f:
            f.write(f"{node} {result['resumed']}\\n")
        return result
    return held_call
import experiments.pbt.population as population
import experiments.sweep as sweep
sweep.run_trial = held(sweep.run_trial)
population.run_member = held(population.run_member)
if sys.argv[1] == "experiments.breakout":
    import time
    from experiments.run import lifecycle
    from ray_setup.connection import RayConnection
    connections, original_enter = [], RayConnection.__enter__
    def enter_and_keep(self):
        connections.append(self)
        return original_enter(self)
    RayConnection.__enter__ = enter_and_keep
    def head_lost():  # as the run's pool reads it, from its connection
        return any(c.head_lost for c in connections)
    original_summary = lifecycle.TrainingRun._summary
    def summary_then_wait(self, trainer, leg, status=None):
        written = original_summary(self, trainer, leg, status)
        if status == "running" and trainer.update >= 1 and not (HOLD_DIR / self.run_uuid).exists():
            (HOLD_DIR / self.run_uuid).write_text("")
            while not head_lost():
                time.sleep(0.01)
        return written
    lifecycle.TrainingRun._summary = summary_then_wait
    if os.environ.get("HOLD_AT_START"):  # held once joined, before its actors start, until the head is lost
        from game.vector import ray_actors
        original_start = ray_actors.RayPool._start
        def start_once_the_head_is_lost(self, worker):
            if not (HOLD_DIR / "joined").exists():
                (HOLD_DIR / "joined").write_text("")
                while not head_lost():
                    time.sleep(0.01)
            return original_start(self, worker)
        ray_actors.RayPool._start = start_once_the_head_is_lost
sys.exit(importlib.import_module(sys.argv[1]).main(sys.argv[2:]))
"""


def start_held_driver(cluster: LocalCluster, cli: Cli, hold_dir: Path, module: str, *args: str, **env: str) -> subprocess.Popen[str]:
    hold_dir.mkdir()
    return forked_run.popen([sys.executable, "-c", HELD_DRIVER, module, *args], cwd=REPO, text=True,
                            env=dict(cluster.driver_env(cli), HOLD_DIR=str(hold_dir), **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def held_runs(hold_dir: Path, count: int, driver: subprocess.Popen[str], timeout_s: float = 600) -> dict[str, str]:
    """{run uuid: node id} once `count` runs hold; fails at once if the driver ends first."""
    deadline = time.monotonic() + timeout_s
    while len(held := [p for p in hold_dir.iterdir() if not p.suffix]) < count:
        if driver.poll() is not None:
            raise AssertionError(f"the driver ended (exit {driver.returncode}) first:\n{driver.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"{len(held)} of {count} runs held after {timeout_s} s"
        time.sleep(0.05)
    return {p.name: p.read_text() for p in held}


def lose_node(cluster: LocalCluster, node: dict) -> None:
    """Its raylet killed; its node's supervisor ends with what was left of it, leaving no orphan."""
    os.kill(node["raylet_pid"], signal.SIGKILL)
    assert wait_dead(node["process_pid"])
    orphans = [pid for pid in process_table.marked(MARK, cluster.marker) if environ_of(pid).get("RAY_RAYLET_PID") == str(node["raylet_pid"])]
    assert orphans == []


def lost_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "was lost" in line]


def our_line(node: dict) -> str:
    return (f"ray: node {node['name']} was lost (127.0.0.1, Ray's id {node['node_id'][:12]}); what ran there is replaced on "
            "the other nodes (Ray's account is in that node's Ray logs)")


def test_a_worker_node_lost_mid_sweep_reruns_its_trial_from_its_checkpoint_elsewhere_and_keeps_the_finished_one(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    """2 trials of 1 CPU on 3 nodes of 1 CPU, both held after update 1. One trial finishes; then the
    worker node of the other is lost: Ray runs it again on a free node, where it resumes from its
    update-1 checkpoint. The CSV keeps the finished trial and names the new node of the re-run one."""
    nodes = local_cluster.bring_back()
    cli, hold, data = Cli(), tmp_path / "hold", tmp_path / "runs"
    driver = start_held_driver(local_cluster, cli, hold, "experiments.sweep", "--ray-address", local_cluster.address,
                               "--grid", "learning_rate=1e-4,2e-4", "--workers-per-trial", "1", "--cpus-per-trial", "1",
                               "--checkpoint-every", "1", "--data-dir", str(data), *TINY)
    try:
        where = held_runs(hold, 2, driver)
        # 2 trials on 2 of the 3 nodes: at least one on a worker node, whose loss is the test
        victim_run = next(run for run, node in where.items() if node != nodes[0]["node_id"])
        victim = next(n for n in nodes if n["node_id"] == where[victim_run])
        [kept_run] = set(where) - {victim_run}
        (hold / f"{kept_run}.go").touch()
        kept_summary = data / "breakout" / kept_run / "summary.json"
        while json.loads(kept_summary.read_text()).get("status") != "completed":
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            time.sleep(0.05)
        lose_node(local_cluster, victim)
        out, err = driver.communicate(timeout=600)
    finally:
        driver.kill()  # a no-op once it has ended; the leftovers check below says what it left
    assert driver.returncode == 0, err[-3000:]
    with Path(out.splitlines()[-1]).open() as f:
        rows = {r["run_uuid"]: r for r in csv.DictReader(f)}
    assert {run: r["status"] for run, r in rows.items()} == {kept_run: "completed", victim_run: "completed"}
    assert rows[kept_run]["node_id"] == where[kept_run]  # the finished trial's result, as it was
    [attempt] = (hold / f"{victim_run}.attempts").read_text().splitlines()  # its first never returned
    new_node, resumed = attempt.split()
    assert resumed == "True" and new_node != victim["node_id"] and new_node in {n["node_id"] for n in nodes}
    assert rows[victim_run]["node_id"] == new_node  # the CSV names where it ran again
    with (data / "breakout" / victim_run / "updates.csv").open() as f:
        assert [int(r["update"]) for r in csv.DictReader(f)] == [1, 2]  # update 1 kept, update 2 done once, elsewhere
    assert rows[victim_run]["env_steps"] == "16"
    assert lost_lines(err) == [our_line(victim)], err[-3000:]
    # Which trial the loss hit, where it went and from which update (experiments/sweep_status.py), and its retry counted.
    trial, names = rows[victim_run]["trial"], {n["node_id"]: n["name"] for n in nodes}
    assert (f"sweep: node {victim['name']}'s loss hit trial {trial}: Ray runs it again on another node, "
            "from its last checkpoint (update 1 or later)") in err, err[-3000:]
    assert (f"sweep: trial {trial} ran again (retry 1) on node {names[new_node]}, from update 1 (its last checkpoint); "
            f"it ran on node {victim['name']}") in err, err[-3000:]
    assert rows[victim_run]["node_name"] == names[new_node]
    assert (rows[victim_run]["retries"], rows[kept_run]["retries"]) == ("1", "0")
    assert "state-dump" not in out + err and "Raylet is terminated" not in out + err, err[-3000:]
    assert cli.leftovers() == []


def test_a_worker_node_lost_mid_population_reruns_its_member_from_its_checkpoint_and_the_lineage_is_unbroken(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    """2 members, an exploit after update 1 of 2, both held after update 1 of their first segment;
    the worker node of one is lost: its segment runs again elsewhere from its checkpoint, and the
    population goes on to its one exploit and its end."""
    from experiments.pbt.population import PrivateDashboard  # the members' live channel, as a population starts its own

    nodes = local_cluster.bring_back()
    cli, hold, runs = Cli(), tmp_path / "hold", tmp_path / "runs"
    (tmp_path / "dashboard").mkdir()
    with PrivateDashboard(tmp_path / "dashboard", runs) as dashboard:
        driver = start_held_driver(local_cluster, cli, hold, "experiments.pbt", "--ray-address", local_cluster.address,
                                   "--dashboard", dashboard.url, "--population", "2", "--interval", "1", "--n-workers", "1",
                                   "--cpus-per-member", "1", "--checkpoint-every", "1", "--data-dir", str(runs), *TINY)
        try:
            where = held_runs(hold, 2, driver)
            victim_run = next(run for run, node in where.items() if node != nodes[0]["node_id"])
            victim = next(n for n in nodes if n["node_id"] == where[victim_run])
            lose_node(local_cluster, victim)
            for run in where:
                (hold / f"{run}.go").touch()
            out, err = driver.communicate(timeout=600)
        finally:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    [lineage] = out.splitlines()
    state = json.loads((Path(lineage).parent / "population.json").read_text())
    member = [m["run_uuid"] for m in state["members"]].index(victim_run)
    attempts = (hold / f"{victim_run}.attempts").read_text().splitlines()
    assert len(attempts) == 2, attempts  # segment 1 again (its first attempt never returned), then segment 2
    new_node, resumed = attempts[0].split()
    assert resumed == "True" and new_node != victim["node_id"], attempts
    with Path(lineage).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["update"] for r in rows] == ["1"] and {r["member"] for r in rows} <= {"0", "1"}, rows  # one exploit, once
    row = rows[0]
    assert (row["node_id"] if row["member"] == str(member) else row["donor_node_id"]) == new_node, row
    for run in where:
        with (runs / "breakout" / run / "updates.csv").open() as f:
            assert [int(r["update"]) for r in csv.DictReader(f)] == [1, 2], run  # none lost, none twice
    assert lost_lines(err) == [our_line(victim)], err[-3000:]
    assert cli.leftovers() == []


def test_a_lost_head_ends_each_driver_with_one_line_naming_the_cluster_and_how_to_go_on_and_nothing_half_written(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """A cluster of its own (a head alone, 4 CPUs: the shared one cannot lose its head), with a sweep
    (1 trial), a population (2 members) and a training run (1 env actor) held after update 1 on it;
    its head is lost. Each driver ends at once, exit 1, with one line of its own, its records whole;
    the training run then goes on from its checkpoint on this machine, as its line says. Each starts
    with SIGINT ignored, as a script's background job does: the head's watcher stops it all the same."""
    from experiments.pbt.population import PrivateDashboard

    cluster_gen = started_cluster(tmp_path_factory, nodes=1, cpus=4)
    cluster = next(cluster_gen)
    cli, runs = Cli(), tmp_path / "runs"
    address = cluster.address
    ignored = {"HOLD_SIGINT_IGNORED": "1"}
    (tmp_path / "dashboard").mkdir()
    try:
        with PrivateDashboard(tmp_path / "dashboard", runs) as dashboard:
            sweep_args = ("--ray-address", address, "--grid", "learning_rate=1e-4", "--cpus-per-trial", "1", "--workers-per-trial", "1",
                          "--checkpoint-every", "1", "--data-dir", str(runs), "--csv", str(tmp_path / "sweep.csv"), *TINY)
            sweep = start_held_driver(cluster, cli, tmp_path / "hold-sweep", "experiments.sweep", *sweep_args, **ignored)
            pbt = start_held_driver(cluster, cli, tmp_path / "hold-pbt", "experiments.pbt", "--ray-address", address,
                                    "--dashboard", dashboard.url, "--population", "2", "--interval", "1", "--n-workers", "1",
                                    "--cpus-per-member", "1", "--checkpoint-every", "1", "--data-dir", str(runs), *TINY, **ignored)
            train = start_held_driver(cluster, cli, tmp_path / "hold-train", "experiments.breakout", "--backend", "ray",
                                      "--ray-address", address, "--n-workers", "1", "--checkpoint-every", "1",
                                      "--data-dir", str(runs), *TINY, **ignored)
            starting = start_held_driver(cluster, cli, tmp_path / "hold-start", "experiments.breakout", "--backend", "ray",
                                         "--ray-address", address, "--n-workers", "1", "--data-dir", str(runs), *TINY,
                                         HOLD_AT_START="1", **ignored)
            drivers = (sweep, pbt, train, starting)
            try:
                [trial] = held_runs(tmp_path / "hold-sweep", 1, sweep)
                members = held_runs(tmp_path / "hold-pbt", 2, pbt)
                [train_run] = held_runs(tmp_path / "hold-train", 1, train)
                held_runs(tmp_path / "hold-start", 1, starting)
                # The head's raylet goes first and its GCS after it, as when the tool ends a lost node's
                # processes. Held here until the drivers have ended (its supervisor stopped), the GCS
                # still answers while every driver's runs fail with the raylet: each must see the head
                # lost all the same (its raylet's port refuses), not count its runs as failed.
                head = cluster.nodes()[0]
                os.kill(head["process_pid"], signal.SIGSTOP)
                try:
                    os.kill(head["raylet_pid"], signal.SIGKILL)
                    (sweep_out, sweep_err), (pbt_out, pbt_err), (train_out, train_err), (start_out, start_err) = (
                        d.communicate(timeout=300) for d in drivers)
                finally:
                    os.kill(head["process_pid"], signal.SIGCONT)
            finally:
                for driver in drivers:
                    driver.kill()
    finally:
        next(cluster_gen, None)  # the tool stops what is left of the cluster, and must leave nothing
    assert (sweep.returncode, pbt.returncode, train.returncode, starting.returncode) == (1, 1, 1, 1), (
        sweep_err[-3000:] + pbt_err[-3000:] + train_err[-3000:] + start_err[-3000:])
    # Lost before its first update: nothing to resume, nothing written, the same one line's shape.
    assert [line for line in start_err.splitlines() if "was lost" in line] == [
        f"train: the Ray cluster at {address} was lost (its head) before the run's first checkpoint: nothing to resume; "
        "start the run again"], start_err[-3000:]
    assert start_out == "" and "Traceback" not in start_err, start_err[-3000:]
    go_on = " ".join(["python -m experiments.sweep", *sweep_args[:-len(TINY) - 2], *TINY, "--resume", str(tmp_path / "sweep.csv")])
    assert [line for line in sweep_err.splitlines() if "was lost" in line] == [
        f"sweep: the Ray cluster at {address} was lost (its head); 0 of 1 trials completed and are kept; go on with: {go_on}"], sweep_err[-3000:]
    folder = Path(pbt_out.strip())
    assert folder.name == "lineage.csv"
    assert [line for line in pbt_err.splitlines() if "was lost" in line] == [
        f"pbt: the Ray cluster at {address} was lost (its head); every member's last checkpoint is kept; go on with: "
        f"python -m experiments.pbt --resume {folder.parent} --ray-address {address}"], pbt_err[-3000:]
    resume = f"python -m experiments.breakout --resume {train_run} --data-dir {runs}"
    assert [line for line in train_err.splitlines() if "was lost" in line] == [
        f"train: the Ray cluster at {address} was lost (its head); the run's last checkpoint (update 1) is kept; go on with: "
        f"{resume} --ray-address {address} (a cluster there again; a new one: its address), or on this machine alone: "
        f"{resume} --backend local --ray-address none"]
    assert train_out.splitlines() == [str(runs / "breakout" / train_run / "summary.json")]
    for err in (sweep_err, pbt_err, train_err):  # Ray's own account stays in its logs
        assert "Traceback" not in err and not [line for line in err.splitlines() if line.startswith("[20")], err[-3000:]
    assert sweep_out.splitlines()[-1] == str(tmp_path / "sweep.csv")
    with (tmp_path / "sweep.csv").open(newline="") as f:
        [row] = list(csv.DictReader(f))
    assert (row["status"], row["run_uuid"], row["learning_rate"]) == ("lost", trial, "0.0001")
    assert folder.read_text() == ",".join(("update", "member", "copied_from", "changes", "node_id", "donor_node_id")) + "\n"
    state = json.loads((folder.parent / "population.json").read_text())
    assert state["generation"] == 0 and [m["run_uuid"] for m in state["members"]] == sorted(members, key=[m["run_uuid"] for m in state["members"]].index)
    for run in [trial, *members]:  # each run as its last checkpoint left it: update 1, whole
        summary = json.loads((runs / "breakout" / run / "summary.json").read_text())
        assert (summary["status"], summary["updates"]) == ("running", 1), summary
        assert (runs / "breakout" / run / "updates.csv").read_text().endswith("\n")
    summary = json.loads((runs / "breakout" / train_run / "summary.json").read_text())
    assert (summary["status"], summary["updates"], summary["error"]) == ("interrupted", 1, f"the Ray cluster at {address} was lost (its head)")
    assert cli.leftovers() == []
    # The line's command on this machine: the run goes on from its update-1 checkpoint, each update once.
    resumed = cli.run("experiments.breakout", *resume.split()[3:], "--backend", "local", "--ray-address", "none")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed at update 1 of 2" in resumed.stderr
    with (runs / "breakout" / train_run / "updates.csv").open() as f:
        assert [int(r["update"]) for r in csv.DictReader(f)] == [1, 2]
    assert cli.leftovers() == []
