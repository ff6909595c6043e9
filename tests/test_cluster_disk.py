"""Nodes that do not share the data folder, on the shared real 3-node cluster (tests/cluster_support.py):
its last worker node sees an empty tmpfs over `local_cluster.private_folder` (tools/local_cluster.py
--private-folder), where the host and the other nodes see the host's folder. A run whose node cannot
see the driver's --data-dir must refuse before it writes anything, and the driver end in one line.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.shared_data_dir import PREFIX, VARIABLE, DataDirNotShared
from tests import process_table
from tests.cluster_support import TINY, LocalCluster, environ_of, run_driver, run_population
from tests.conftest import MARK, Cli


def refusal(data: Path, node_id: str, node: str | None = None) -> str:
    return (f"--data-dir {data}: node {node or '127.0.0.1/' + node_id[:12]} cannot see this folder as the driver does (its run was not "
            "started there); every node must see the same data folder at the same path (docs/ray.md)")


def private_node(local_cluster: LocalCluster) -> dict:
    """The cluster, whole again, and its node with the private view: the last worker node."""
    nodes = local_cluster.bring_back()
    assert local_cluster.private_folder is not None
    [private] = [n for n in nodes if n["private_folder"] == str(local_cluster.private_folder)]
    assert private["name"] == "node-3"
    return private


def assert_nothing_left(local_cluster: LocalCluster, cli: Cli, data: Path, private: dict) -> None:
    """Nothing written on the refusing node, the driver's marker removed, and no process of the job
    left on any node (every Ray worker of the job carries its token)."""
    assert os.listdir(f"/proc/{private['raylet_pid']}/root{local_cluster.private_folder}") == []
    assert not [p for p in data.iterdir() if p.name.startswith(PREFIX)]
    assert cli.leftovers() == []

    def of_the_job() -> list[int]:
        return [pid for pid in process_table.marked(MARK, local_cluster.marker) if VARIABLE in environ_of(pid)]

    assert wait_until(lambda: not of_the_job()), of_the_job()


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.cluster
def test_a_sweep_whose_trial_lands_on_a_node_that_cannot_see_its_data_folder_ends_in_one_line_and_leaves_nothing(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    """3 trials of 1 CPU on 3 nodes of 1 CPU: they run at once, so one lands on the node with the
    private view. It refuses, having written nothing on its node; the driver stops the other two
    (each at a checkpoint, or before it began), writes the CSV and ends with exit 2."""
    private = private_node(local_cluster)
    cli = Cli()
    data = local_cluster.private_folder / tmp_path.name / "runs"  # this test's alone, under the shared cluster's folder
    results = tmp_path / "sweep.csv"
    result = run_driver(local_cluster, cli, "experiments.sweep", "--ray-address", local_cluster.address,
                        "--grid", "learning_rate=1e-4,2e-4,3e-4", "--workers-per-trial", "1", "--cpus-per-trial", "1",
                        "--checkpoint-every", "1", "--data-dir", str(data), "--csv", str(results), *TINY)
    assert result.returncode == 2, result.stderr[-3000:]
    line = "error: " + refusal(data, private["node_id"])
    assert [e for e in result.stderr.splitlines() if e.startswith("error:")] == [line], result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == str(results)
    with results.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and {r["status"] for r in rows} <= {"refused", "completed", "interrupted", "stopped"}, rows
    refused = [r for r in rows if r["status"] == "refused"]
    assert refused and all(r["error"] == refusal(data, private["node_id"]) for r in refused), rows
    for row in refused:  # nothing of it on the host either (nor on its node: assert_nothing_left)
        assert not (data / "breakout" / row["run_uuid"]).exists()
    for row in rows:  # the others stopped whole; a finished one's result as its run left it
        summary_path = data / "breakout" / row["run_uuid"] / "summary.json"
        if row["status"] != "refused" and summary_path.exists():
            summary = json.loads(summary_path.read_text())
            assert summary["status"] != "running" or summary["updates"] >= 1, summary  # none cut mid-start
            if summary["status"] == "completed":
                assert (row["status"], row["node_id"]) == ("completed", summary["node_id"]), row
            updates = summary_path.with_name("updates.csv")
            assert not updates.exists() or updates.read_text().endswith("\n")
    assert_nothing_left(local_cluster, cli, data, private)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.cluster
def test_a_population_whose_member_lands_on_a_node_that_cannot_see_its_data_folder_ends_in_one_line_and_leaves_nothing(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    """The population's side of the sweep's test above: 3 members of 1 CPU on 3 nodes of 1 CPU,
    so one lands on the node with the private view. It refuses before it writes; the driver asks
    the other two to stop at a checkpoint, records no generation and ends with exit 2."""
    private = private_node(local_cluster)
    cli = Cli()
    data = local_cluster.private_folder / tmp_path.name / "runs"
    result = run_population(local_cluster, cli, 3, data, tmp_path / "dashboard")
    assert result.returncode == 2, result.stderr[-3000:]
    assert [e for e in result.stderr.splitlines() if e.startswith("error:")] == ["error: " + refusal(data, private["node_id"])], \
        result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lineage = Path(result.stdout.splitlines()[-1])
    with lineage.open(newline="") as f:
        assert list(csv.DictReader(f)) == []  # no generation was finished, so none recorded
    population = json.loads((lineage.parent / "population.json").read_text())
    assert population["generation"] == 0
    run_dirs = [data / "breakout" / m["run_uuid"] for m in population["members"]]
    assert len(run_dirs) == 3 and not all(d.exists() for d in run_dirs)  # the refused member's run was never made
    for summary_path in (d / "summary.json" for d in run_dirs):
        if summary_path.exists():  # a member that started stopped whole, at a checkpoint
            summary = json.loads(summary_path.read_text())
            assert summary["status"] != "running" or summary["updates"] >= 1, summary
    assert_nothing_left(local_cluster, cli, data, private)


def test_a_member_or_trial_whose_node_cannot_see_the_data_folder_refuses_before_it_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_member's and run_trial's first act, in process: a token the folder does not hold (another
    driver's, or a folder the node sees empty) is refused, and nothing is created."""
    from experiments.pbt.population import run_member
    from experiments.ray_tasks import run_trial

    data = tmp_path / "runs"
    data.mkdir()
    (data / f"{PREFIX}{'a' * 16}").write_text("b" * 32)  # another driver's marker, same name prefix
    monkeypatch.setenv(VARIABLE, "a" * 32)
    ray_before = sys.modules.get("ray")
    for call in (run_member, run_trial):
        with pytest.raises(DataDirNotShared) as refused:
            call({"data_dir": str(data)}, "c" * 32, "member 0")
        assert str(refused.value) == refusal(data, "", node=os.uname().nodename)  # no Ray here: the host is named
    assert sorted(p.name for p in data.iterdir()) == [f"{PREFIX}{'a' * 16}"]
    # Naming the node imports no Ray: imported here, it would make this process's next private Ray
    # refuse to start (it would listen beyond loopback), as every in-process Ray test after this did.
    assert sys.modules.get("ray") is ray_before


def wait_until(condition: Callable[[], bool], timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
