"""A real Ray cluster of 3 nodes on this machine (tools/local_cluster.py), shared by every cluster
test of a pytest worker (Ray takes tens of seconds to start 3 nodes on 2 cores), and what those
tests use to drive it as docs/ray.md tells a user: the cluster's token in RAY_AUTH_TOKEN_PATH alone,
then `--ray-address`. tests/conftest.py's `local_cluster` fixture starts it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ray_setup.installed import ray_installed
from tests import forked_run, process_table
from tests.conftest import MARK, REPO, Cli, wait_until_no_processes

TOOL = REPO / "tools" / "local_cluster.py"
TINY = ("--updates", "2", "--worker-steps", "8", "--minibatches", "1", "--epochs", "1")


@dataclass
class LocalCluster:
    process: subprocess.Popen[str]
    marker: str  # in the environment of every process of every node
    exports: dict[str, str]  # what the tool printed, NAME=value
    private_folder: Path | None = None  # empty on the last worker node (--private-folder): only tests/test_cluster_disk.py uses it

    @property
    def address(self) -> str:
        return self.exports["RAY_ADDRESS"]

    def nodes(self) -> list[dict]:
        return json.loads(Path(self.exports["LOCAL_CLUSTER_NODES"]).read_text())

    def bring_back(self, timeout_s: float = 300) -> list[dict]:
        """Every worker node a test killed started again (the tool's SIGUSR1), so that a test that
        loses one finds all 3; returns the nodes once each one's raylet runs."""
        def lost() -> list[dict]:
            return [n for n in self.nodes() if not process_table.is_alive(n["raylet_pid"])]

        if gone := lost():
            assert all(wait_dead(n["process_pid"]) for n in gone)  # the tool restarts a node whose process ended
            self.process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + timeout_s
            while lost():
                assert self.process.poll() is None and time.monotonic() < deadline, "the lost nodes did not come back"
                time.sleep(0.1)
        return self.nodes()

    def driver_env(self, cli: Cli, **changes: str | None) -> dict[str, str]:
        """A driver's environment as docs/ray.md sets it: the token's path, no RAY_AUTH_MODE (the
        commands set it), then `changes` (None: removed)."""
        env = {k: v for k, v in cli.env().items() if not k.startswith("RAY_")}
        env["RAY_AUTH_TOKEN_PATH"] = self.exports["RAY_AUTH_TOKEN_PATH"]
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env


def started_cluster(tmp_path_factory: pytest.TempPathFactory, nodes: int = 3, cpus: int = 1) -> Iterator[LocalCluster]:
    """tools/local_cluster.py --nodes 3 --cpus-per-node 1 (or as given), its last worker node with a
    private view of a folder of its own (--private-folder), stopped (SIGTERM) when the worker's
    cluster tests are done; it must leave no process, no folder and no mount."""
    if not ray_installed():
        pytest.skip('Ray is not installed (pip install -e ".[ray]")')
    marker = Cli().marker
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({MARK: marker, "PYTHONPATH": str(REPO)})
    log = tmp_path_factory.mktemp("local-cluster") / "stderr"
    private = tmp_path_factory.mktemp("node-private-view") if nodes > 1 else None
    argv = [sys.executable, str(TOOL), "--nodes", str(nodes), "--cpus-per-node", str(cpus)]
    process = subprocess.Popen(argv + (["--private-folder", str(private)] if private else []), cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    exports: dict[str, str] = {}
    try:
        assert process.stdout is not None
        while "LOCAL_CLUSTER_NODES" not in exports:  # the tool prints its lines once every node is up
            line = process.stdout.readline()
            assert line, f"the cluster did not start (exit {process.wait()}): {log.read_text()[-3000:]}"
            name, _, value = line.strip().partition("=")
            exports[name] = value
        yield LocalCluster(process, marker, exports, private)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=180)
        folder = Path(exports["RAY_AUTH_TOKEN_PATH"]).parent if "RAY_AUTH_TOKEN_PATH" in exports else None
        assert process.returncode == 0, log.read_text()[-3000:]
        assert wait_until_no_processes(marker) == []
        assert folder is None or not folder.exists()
        assert private is None or f" {private} " not in Path("/proc/self/mountinfo").read_text()  # the host's view untouched


def run_driver(cluster: LocalCluster, cli: Cli, module: str, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    return forked_run.run([sys.executable, "-m", module, *args], cwd=REPO, env=cluster.driver_env(cli, **env),
                          text=True, timeout=600)


def run_population(cluster: LocalCluster, cli: Cli, members: int, data: Path, dashboard_data: Path) -> subprocess.CompletedProcess[str]:
    """`pbt --ray-address` of `members` members of 1 CPU writing under `data`, their live channel a
    dashboard with its data in `dashboard_data` (made here), started as a population starts its own."""
    from experiments.pbt.population import PrivateDashboard

    dashboard_data.mkdir()
    with PrivateDashboard(dashboard_data, data) as dashboard:
        return run_driver(cluster, cli, "experiments.pbt", "--ray-address", cluster.address, "--dashboard", dashboard.url,
                          "--population", str(members), "--interval", "1", "--n-workers", "1", "--cpus-per-member", "1",
                          "--data-dir", str(data), *TINY)


def wait_dead(pid: int, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while process_table.is_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_reaped(pid: int, timeout_s: float = 120) -> bool:
    """Whether `pid` is gone from the process table (reaped by its parent: not even a zombie)."""
    import psutil

    def zombie() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout_s
    while zombie():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(v.decode(errors="replace").split("=", 1) for v in raw.split(b"\0") if b"=" in v)

