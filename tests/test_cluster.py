"""The cluster path on a real Ray cluster of 3 nodes on this machine (tests/cluster_support.py's
shared `local_cluster`), as docs/ray.md tells a user to drive it. The test that loses a node runs
after those that need every node, and every test checks what it started left nothing.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import forked_run, process_table
from tests.cluster_support import TINY, LocalCluster, environ_of, run_driver, run_population, wait_dead, wait_reaped
from tests.conftest import MARK, REPO, Cli

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.cluster]


def test_the_local_cluster_listens_on_loopback_only_with_a_private_token(local_cluster: LocalCluster) -> None:
    assert list(local_cluster.exports) == ["RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "LOCAL_CLUSTER_NODES"]
    assert local_cluster.address.startswith("127.0.0.1:")
    nodes = local_cluster.bring_back()  # every node, those a test before lost started again
    assert [n["name"] for n in nodes] == ["head", "node-2", "node-3"] and len({n["node_id"] for n in nodes}) == 3
    pids = process_table.marked(MARK, local_cluster.marker)
    listening = {pid: process_table.listening_sockets(pid) for pid in pids}
    assert {n["raylet_pid"] for n in nodes} <= {pid for pid, sockets in listening.items() if sockets}
    beyond = [(pid, a, port) for pid, sockets in listening.items() for a, port in sockets if not process_table.is_loopback(a)]
    assert beyond == []
    token = Path(local_cluster.exports["RAY_AUTH_TOKEN_PATH"])
    assert stat.S_IMODE(token.lstat().st_mode) == 0o600 and stat.S_IMODE(token.parent.lstat().st_mode) == 0o700


def test_a_driver_without_the_clusters_token_or_with_another_is_refused_in_one_line(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    cli = Cli()
    other = tmp_path / "other_token"
    other.write_text("0" * 64)
    other.chmod(0o600)
    home = tmp_path / "home"
    home.mkdir()
    address = local_cluster.address
    cases = {
        "none": ({"RAY_AUTH_TOKEN_PATH": None, "HOME": str(home)},
                 f"error: --ray-address {address}: expected this driver to have the cluster's token: set RAY_AUTH_TOKEN_PATH "
                 "to the cluster's token file (mode 0600)"),
        "another": ({"RAY_AUTH_TOKEN_PATH": str(other)},
                    f"error: --ray-address {address}: expected the cluster's own token, but it refused the one in "
                    f"RAY_AUTH_TOKEN_PATH={other}: set RAY_AUTH_TOKEN_PATH to the cluster's token file (mode 0600)"),
    }
    # F6 (issue 71): the right token with RAY_AUTH_MODE=disabled, which sends none, was said to be the wrong token.
    cases["disabled"] = ({"RAY_AUTH_MODE": "disabled"},
                         f"error: --ray-address {address}: expected RAY_AUTH_MODE=token or unset: RAY_AUTH_MODE=disabled sends "
                         f"no token, not even the one in RAY_AUTH_TOKEN_PATH={local_cluster.exports['RAY_AUTH_TOKEN_PATH']}, "
                         "and this cluster asks for its own")
    commands = {"none": ("experiments.breakout", "--backend", "ray"),  # each command refuses through the same check
                "another": ("experiments.sweep", "--grid", "learning_rate=1e-4,2e-4"),
                "disabled": ("experiments.breakout", "--backend", "ray")}
    for name, (env, line) in cases.items():
        data = tmp_path / name
        result = run_driver(local_cluster, cli, *commands[name], "--ray-address", address, "--data-dir", str(data), *TINY, **env)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", line + "\n"), result.stderr[-3000:]
        assert not data.exists()  # nothing started
    assert cli.leftovers() == []


def try_out_commands() -> list[str]:
    """The run and the sweep of docs/ray.md's "Try a cluster on one machine", as a user copies them."""
    section = (REPO / "docs" / "ray.md").read_text().split("## Try a cluster on one machine", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [line for line in block.splitlines() if line.startswith("python -m experiments.")]


def run_as_written(cluster: LocalCluster, cli: Cli, command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """`command` in bash in `folder`, with every line the tool printed exported (as the docs do)."""
    folder.mkdir()
    env = {**cluster.driver_env(cli), **cluster.exports}
    return forked_run.run(["bash", "-c", command], cwd=folder, env=env, text=True, timeout=600)


def test_the_try_outs_run_ends_with_its_actors_named_on_their_nodes(local_cluster: LocalCluster, tmp_path: Path) -> None:
    """The docs' try-out run ends within a minute (not the default schedule's days), and its start
    line says its workers are Ray actors, placed on the cluster's nodes by name."""
    cli = Cli()
    run, _sweep = try_out_commands()
    assert run.startswith("python -m experiments.breakout --backend ray") and "--updates" in run  # a run that ends
    result = run_as_written(local_cluster, cli, run, tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / result.stdout.splitlines()[-1]).read_text())  # a path from where it ran
    updates = int(run.split("--updates ")[1].split()[0])
    assert (summary["status"], summary["updates"], summary["env_steps"]) == ("completed", updates, updates * 1024)
    assert f"8 games in 2 Ray actors of 4 (the Ray cluster at {local_cluster.address})" in result.stderr, result.stderr[-3000:]
    names = {n["name"] for n in local_cluster.nodes()}
    placed = re.search(r"its 2 Ray actors run on 2 nodes: (\S+) \(1 actor\), (\S+) \(1 actor\)", result.stderr)
    assert placed is not None and set(placed.groups()) <= names, result.stderr[-3000:]
    assert sorted(summary["ray_node_names"]) == sorted(placed.groups())
    assert cli.leftovers() == []


def test_the_try_outs_sweep_spreads_its_trials_over_nodes_and_its_csv_names_each_trials_node(
        local_cluster: LocalCluster, tmp_path: Path) -> None:
    cli = Cli()
    _run, sweep = try_out_commands()
    result = run_as_written(local_cluster, cli, sweep, tmp_path / "sweep")
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    with Path(result.stdout.splitlines()[-1]).open() as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["completed", "completed"]
    nodes = [r["node_id"] for r in rows]
    assert len(set(nodes)) == 2 and set(nodes) <= {n["node_id"] for n in local_cluster.nodes()}, nodes
    names = {n["node_id"]: n["name"] for n in local_cluster.nodes()}
    assert [r["node_name"] for r in rows] == [names[node] for node in nodes], rows  # the name beside Ray's id
    for node in nodes:  # the final table names each trial's node
        assert re.search(rf"^\d+ +\d+ +\S+ +\d+ +completed +0 +{re.escape(names[node])} ", result.stderr, re.M), result.stderr[-3000:]
    for row in rows:  # each trial's own summary says the same node, and ran the try-out's updates
        summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        assert summary["node_id"] == row["node_id"] and summary["updates"] == int(sweep.split("--updates ")[1].split()[0])
    assert cli.leftovers() == []


# One task on each node, of a job whose code is the folder argv[2]: the folder each ran in, and what it holds.
WHERE_THE_CODE_RUNS = """
import json, os, sys
from ray_setup.connection import RayConnection

with RayConnection(sys.argv[1], runtime_env={"working_dir": sys.argv[2]}) as connection:  # imports Ray, loopback kept
    ray = connection.ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=1)
    def where() -> tuple[str, list[str]]:
        return os.getcwd(), sorted(os.listdir("."))

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    done = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote() for node in nodes]
    print(json.dumps(dict(zip(nodes, ray.get(done)))))
"""


def test_each_node_unpacks_a_jobs_code_in_a_folder_of_its_own(local_cluster: LocalCluster, tmp_path: Path) -> None:
    """The nodes of tools/local_cluster.py share one machine's disk, and Ray unpacks a job's code
    (its working_dir) under the node's session folder, removing what is there first. With one
    folder for every node, a node unpacking the code removed it under a task already importing it
    on another: a sweep's trials failed at once with ModuleNotFoundError for
    experiments.run.progress (CI, 2026-12-07). Each node unpacks into a folder of its own."""
    local_cluster.bring_back()
    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text("WORDS = 'the job'\n")
    result = forked_run.run([sys.executable, "-c", WHERE_THE_CODE_RUNS, local_cluster.address, str(code)], cwd=REPO,
                            env=local_cluster.driver_env(Cli()), text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    where = json.loads(result.stdout.splitlines()[-1])
    assert set(where) == {n["node_id"] for n in local_cluster.nodes()}
    folders = [folder for folder, _ in where.values()]
    assert len(set(folders)) == 3, folders  # one per node
    assert all(listing == ["job.py"] for _, listing in where.values()), where


def test_a_population_no_node_can_take_is_refused_before_anything_is_written(local_cluster: LocalCluster, tmp_path: Path) -> None:
    """F8 (issue 71): members of more CPUs than any node has ended the driver with exit 1, after it
    had made the population's folder and started its private dashboard."""
    cli = Cli()
    data = tmp_path / "runs"
    result = run_driver(local_cluster, cli, "experiments.pbt", "--ray-address", local_cluster.address, "--population", "2",
                        "--interval", "1", "--n-workers", "1", "--cpus-per-member", "64", "--data-dir", str(data),
                        "--dashboard", "http://127.0.0.1:9", *TINY)  # never reached: the refusal comes first
    assert (result.returncode, result.stdout) == (2, ""), result.stderr[-3000:]
    assert result.stderr == (f"error: --cpus-per-member 64: expected at most the CPUs of one node of the cluster at "
                             f"{local_cluster.address}\n")
    assert not data.exists()  # no population folder, no dashboard's store
    assert cli.leftovers() == []


def test_a_populations_members_spread_over_nodes_and_its_lineage_names_them(local_cluster: LocalCluster, tmp_path: Path) -> None:
    """2 members of 1 CPU on nodes of 1 CPU each: 2 nodes; the exploit's row names the member's and the donor's."""
    cli = Cli()
    result = run_population(local_cluster, cli, 2, tmp_path / "runs", tmp_path / "dashboard")
    assert result.returncode == 0, result.stderr[-3000:]
    [lineage] = result.stdout.splitlines()
    with Path(lineage).open(newline="") as f:
        [row] = list(csv.DictReader(f))  # the one exploit, after update 1
    ids = {n["node_id"] for n in local_cluster.nodes()}
    assert row["node_id"] != row["donor_node_id"] and {row["node_id"], row["donor_node_id"]} <= ids, row
    names = {n["node_id"]: n["name"] for n in local_cluster.nodes()}  # each member's line names its node (issue 71)
    assert f"  member {row['member']} (node {names[row['node_id']]}): at update 1" in result.stderr, result.stderr[-3000:]
    assert cli.leftovers() == []


def test_a_runs_actors_spread_over_nodes_and_one_lost_with_its_node_is_replaced_with_no_orphan_left(
        local_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It leaves the cluster a node short (a test that needs it whole brings it back). A held run (tests/conftest.py's HELD_RUN), its 2
    actors on 2 nodes (1 CPU a node), is mid-training when the node of one of them is killed (its
    raylet, SIGKILL). Its summary names the nodes its actors used, the lost one's and the new one's."""
    local_cluster.bring_back()  # 3 nodes: 2 for the actors, 1 for the replacement
    cli = Cli()
    for name in [n for n in os.environ if n.startswith("RAY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", local_cluster.exports["RAY_AUTH_TOKEN_PATH"])
    hold = tmp_path / "hold"
    run = cli.start_held(hold, "--backend", "ray", "--ray-address", local_cluster.address, "--n-workers", "2",
                         "--envs-per-worker", "1", "--data-dir", str(tmp_path / "runs"), "--updates", "2",
                         "--worker-steps", "8", "--minibatches", "1", "--epochs", "1", until="release")
    [summary_path] = (tmp_path / "runs").rglob("summary.json")
    ids = {n["node_id"] for n in local_cluster.nodes()}
    used = json.loads(summary_path.read_text())["ray_nodes"]
    assert len(used) == 2 and set(used) <= ids, used
    victim = next(n for n in local_cluster.nodes() if n["name"] != "head" and n["node_id"] in used)
    os.kill(victim["raylet_pid"], signal.SIGKILL)
    assert wait_dead(victim["process_pid"])  # its node's supervisor ends with what was left of the node
    assert wait_reaped(victim["process_pid"])  # and the tool reaps it at once, not at its own end (issue 71)
    orphans = [pid for pid in process_table.marked(MARK, local_cluster.marker)
               if environ_of(pid).get("RAY_RAYLET_PID") == str(victim["raylet_pid"])]
    assert orphans == []  # no worker of the lost node lives on
    # Ray tells the driver of the lost node asynchronously (its health check): a run let go at once
    # could end before the news came, and print no node-lost line (seen once under load). The held
    # run says it first; its stderr so far is kept for the checks below.
    seen: list[str] = []
    told = threading.Event()

    def read_until_told() -> None:
        assert run.stderr is not None
        for line in iter(run.stderr.readline, ""):
            seen.append(line)
            if "was lost" in line:
                told.set()
                return

    reader = threading.Thread(target=read_until_told, daemon=True)
    reader.start()
    told.wait(timeout=300)  # a guard against a hang only: the assertion below says what was missing
    hold.with_suffix(".go").touch()
    reader.join()  # it returns at the line, or at the end of the run's stderr
    out, rest = run.communicate(timeout=600)
    err = "".join(seen) + rest
    assert run.returncode == 0, err[-3000:]
    assert out.splitlines() == [str(summary_path)]
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "completed" and summary["updates"] == 2 and summary["worker_restarts"] >= 1, summary
    assert summary["env_steps"] == 2 * 2 * 8  # every update's steps once: none counted twice
    assert summary["ray_nodes"][:2] == used and set(summary["ray_nodes"]) == ids, summary  # the new actor's node added
    assert summary["node_id"] in ids  # the node the driver joined through
    # Every node named as the tool named it (issue 71): where the actors were placed, the lost one,
    # where the replacement went; the summary keeps Ray's ids beside the names.
    names = {n["node_id"]: n["name"] for n in local_cluster.nodes()}
    assert f"its 2 Ray actors run on 2 nodes: {names[used[0]]} (1 actor), {names[used[1]]} (1 actor)" in err, err[-3000:]
    assert f"replaced it (restart 1) on {names[summary['ray_nodes'][2]]} during update" in err, err[-3000:]
    assert summary["ray_node_names"] == [names[node] for node in summary["ray_nodes"]], summary
    assert summary["node_name"] == names[summary["node_id"]], summary
    assert "state-dump" not in err and "Raylet is terminated" not in err, err[-3000:]  # Ray's account stays in its logs
    assert [line for line in err.splitlines() if "was lost" in line] == [
        f"ray: node {victim['name']} was lost (127.0.0.1, Ray's id {victim['node_id'][:12]}); what ran there is replaced on "
        "the other nodes (Ray's account is in that node's Ray logs)"], err[-3000:]
    with (summary_path.parent / "updates.csv").open() as f:
        assert [int(r["update"]) for r in csv.DictReader(f)] == [1, 2]
    assert cli.leftovers() == []


def test_node_crossing_measures_actors_spread_over_nodes_on_one_node_and_pipes_in_one_run(
        local_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """tools/node_crossing.py joins the cluster as docs/ray.md says and measures its three layouts at
    a tiny duration (numbers are the command's to report, not this test's): on whichever nodes are
    up (the test that loses one may have run before), spread uses 2, one node 1, pipes none."""
    import importlib.util
    import subprocess

    from tests.conftest import REPO

    tool = REPO / "tools" / "node_crossing.py"
    spec = importlib.util.spec_from_file_location("node_crossing", tool)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for argv, line in ((["--actors", "1"], "error: --actors 1: expected an integer from 2 to 64"),
                       (["--ray-address", "head"], "error: --ray-address head: expected auto or HOST:PORT, a Ray cluster's GCS address")):
        with pytest.raises(SystemExit) as exited:
            module.main(argv)
        assert (exited.value.code, capsys.readouterr()) == (2, ("", line + "\n"))
    cli = Cli()
    result = subprocess.run([sys.executable, str(tool), "--ray-address", local_cluster.address, "--actors", "2",
                             "--envs-per-actor", "1", "--duration", "0.05"], cwd=REPO, env=local_cluster.driver_env(cli),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = result.stdout.splitlines()
    measured = json.loads(line)
    up = {n["node_id"] for n in local_cluster.nodes() if process_table.is_alive(n["raylet_pid"])}
    spread, one, pipes = measured["ray_spread"], measured["ray_one_node"], measured["pipes"]
    assert spread["nodes_used"] == len(set(spread["actor_nodes"])) == 2 and set(spread["actor_nodes"]) <= up, spread
    assert one["nodes_used"] == 1 and one["actor_nodes"] == [spread["actor_nodes"][0]] * 2, one  # the node it joined through
    assert (pipes["nodes_used"], pipes["actor_nodes"], measured["cluster"]["started_here"]) == (1, [], False)
    for layout in (spread, one, pipes):
        assert all(layout[key] > 0 for key in ("env_sps", "step_us", "roundtrip_us", "roundtrip_all_us")), layout
        assert len(layout["worker_pids"]) == 2 and all(wait_dead(pid) for pid in layout["worker_pids"])
    assert cli.leftovers() == []


def test_the_folder_a_killed_tool_left_is_removed_by_the_next_start(tmp_path: Path) -> None:
    """F5 (issue 71): a tools/local_cluster.py killed with SIGKILL left its ray-cluster-* folder (the
    token and Ray's logs), and nothing ever removed it. Its nodes end with it (a parent-death
    signal); the next start removes the folder, as a private Ray's start removes ray-private-* ones."""
    import subprocess

    from tests.cluster_support import TOOL
    from tests.conftest import REPO, wait_until_no_processes

    def start(marker: str) -> tuple[subprocess.Popen[str], Path]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {MARK: marker, "PYTHONPATH": str(REPO)}
        tool = subprocess.Popen([sys.executable, str(TOOL), "--nodes", "1", "--cpus-per-node", "1"], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=(tmp_path / f"{marker}.stderr").open("w"), text=True)
        exports: dict[str, str] = {}
        while "LOCAL_CLUSTER_NODES" not in exports:  # the tool prints its lines once its node is up
            line = tool.stdout.readline()
            assert line, f"the cluster did not start (exit {tool.wait()})"
            name, _, value = line.strip().partition("=")
            exports[name] = value
        return tool, Path(exports["RAY_AUTH_TOKEN_PATH"]).parent

    import importlib.util
    import shutil

    marker = Cli().marker
    killed, left = start(marker)
    killed.kill()
    killed.wait()
    assert wait_until_no_processes(marker) == []  # its node went with it
    assert left.is_dir()  # what the issue found: nothing removed it
    # The next start's first act, before any node (the tool's `private_folder`, run here as its main runs it).
    spec = importlib.util.spec_from_file_location("local_cluster", TOOL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    folder, _ = tool.private_folder()
    try:
        assert folder != left and not left.exists()  # the next start removed it
        assert folder.is_dir()  # and its own is not taken for a dead tool's: this process owns it
        assert tool.private_folder()[0] != folder and folder.exists()
    finally:
        for made in Path(folder).parent.glob(f"{tool.CLUSTER_PREFIX}*"):
            if (made / "owner").is_file() and (made / "owner").read_text().split()[0] == str(os.getpid()):
                shutil.rmtree(made)
