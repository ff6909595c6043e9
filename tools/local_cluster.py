"""A Ray cluster of several nodes on this machine, to try the cluster path before a real one (and
for the tests): each node a raylet of its own, every port on loopback, token authentication on.

    python tools/local_cluster.py --nodes 3 --cpus-per-node 1

Once every node is up it prints, one `NAME=value` a line, what a driver needs to join, ready to
`export` (`eval "$(…)"` or copy them): `RAY_ADDRESS` (the head's GCS), `RAY_AUTH_TOKEN_PATH` (the
cluster's token: 256 random bits in a 0600 file inside a fresh 0700 folder, made before any node
starts) and `LOCAL_CLUSTER_NODES` (a JSON file naming each node: its Ray node id, its raylet's pid
and its supervising process's pid; kill a raylet to lose that node). Each node is named (`head`,
`node-1`, …) by its Ray label `name`, which drivers show for it (ray_setup/nodes.py). A SIGUSR1 starts every lost
worker node again, under its name, and rewrites that file. It runs until SIGTERM or SIGINT, then
stops every node (workers first, the head last; by pid) and removes its folder.

`--private-folder PATH` gives the last worker node a view of the disk of its own: its process and
all of the node's processes run in a mount namespace of their own, where an empty tmpfs covers
PATH (an existing folder); the other nodes see the host's PATH. So a data folder under PATH is one
that node does not share, as on machines without a shared disk. That node is started so again when
brought back; the namespace, and its tmpfs with it, goes when the node's last process ends.

Why every node is on 127.0.0.1: Ray's servers listen on loopback only when their node's address
is 127.0.0.1, and on every interface for any other address (127.0.0.2 included). So every node
has that address and its own ports, and Ray is imported with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
(Ray's single-machine switch) so that it keeps it: a driver joining a loopback address does the
same (ray_setup/loopback.py). `ray start` cannot be used: with that switch it refuses every node
but the head, so each node is started here through Ray's internal `Node`, one process per node
(ray_setup/ray_internals.py).

Each node's process watches its raylet and reaps it the moment it ends: a raylet left a zombie
still looks alive to its workers (they check their raylet's pid), so the actors of a lost node
would live on as orphans. It is also the subreaper of its node's processes and ends whatever of
them is left, so nothing outlives a lost node; and it ends with this tool (a parent-death signal).

The nodes share one session folder (one disk), as a real cluster's machines do not. Ray unpacks a
job's code (`working_dir`) for each node in that folder, replacing any copy there, so each worker
node here has a folder of its own for it (`runtime_resources-NAME`; the head keeps Ray's): one
node's unpacking would pull the files from under the tasks of another.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ray_setup.loopback import LOCAL_ONLY_VARIABLE, LOOPBACK
from ray_setup.nodes import NAME_LABEL
from ray_setup.token_folder import CLUSTER_PREFIX, TOKEN_FILE, make_token_folder

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_CLONE_NEWNS, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x20000, 2, 4, 1 << 14, 1 << 18
OBJECT_STORE_BYTES = 96 * 1024 * 1024  # per node: the actors' replies are small, and nodes share one machine's memory


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python tools/local_cluster.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3, metavar="N", help="nodes, the head included, 1 to 16 (default 3)")
    parser.add_argument("--cpus-per-node", type=int, default=1, metavar="C", help="logical CPUs each node offers, 1 to 64 (default 1)")
    parser.add_argument("--private-folder", metavar="PATH",
                        help="the last worker node sees an empty folder at PATH (an existing folder), the others the host's")
    parser.add_argument("--node", choices=("head", "worker"), help=argparse.SUPPRESS)  # one node's own process
    parser.add_argument("--gcs", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)  # the node's name, its Ray label (ray_setup/nodes.py)
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 16:
        parser.error(f"--nodes {args.nodes}: expected an integer from 1 to 16")
    if not 1 <= args.cpus_per_node <= 64:
        parser.error(f"--cpus-per-node {args.cpus_per_node}: expected an integer from 1 to 64")
    if args.private_folder is not None and args.node is None:
        if args.nodes < 2:
            parser.error(f"--private-folder {args.private_folder}: expected --nodes 2 or more (a worker node to give it)")
        if not Path(args.private_folder).is_absolute() or not Path(args.private_folder).is_dir():
            parser.error(f"--private-folder {args.private_folder}: expected the absolute path of an existing folder")
    return args


# ---- one node (its own process) ------------------------------------------------------------------

def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def private_view(folder: str) -> None:
    """This process (and all it starts) in a mount namespace of its own, with an empty tmpfs over
    `folder`; mounts made private first, so nothing of it reaches the host's view."""
    libc = ctypes.CDLL(None, use_errno=True)
    for call in (lambda: libc.unshare(_CLONE_NEWNS), lambda: libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
                 lambda: libc.mount(b"tmpfs", folder.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755,size=16m")):
        if call() != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"--private-folder {folder}: {os.strerror(errno)} (a mount namespace needs root)")


def run_node(args: argparse.Namespace) -> int:
    """Starts one node, prints `UP <gcs address> <node id> <raylet pid>`, then waits: a SIGTERM stops
    the node; its raylet ending (killed: the node is lost) ends the node's other processes too."""
    if args.private_folder is not None:
        private_view(args.private_folder)  # first, while this process has one thread
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)  # the tool gone (even by SIGKILL), its nodes go too
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # orphans of this node's processes come back here, not to init
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the tool's to act on, in its order
    os.environ[LOCAL_ONLY_VARIABLE] = "0"  # before `import ray`: keep 127.0.0.1, Ray's loopback-only address
    from ray_setup.ray_internals import LocalNode

    head = args.node == "head"
    options: dict[str, Any] = dict(num_cpus=args.cpus_per_node, num_gpus=0, node_ip_address=LOOPBACK,
                                   temp_dir=str(Path(args.folder) / "ray"), include_dashboard=False,
                                   object_store_memory=OBJECT_STORE_BYTES, min_worker_port=0, max_worker_port=0,
                                   node_manager_port=0, labels={NAME_LABEL: args.name or args.node})
    if head:
        # A lost node noticed in about 3 s rather than Ray's 30: until then the scheduler may still
        # place a replacement on it.
        options.update(gcs_server_port=0, _system_config={"health_check_period_ms": 1000, "health_check_failure_threshold": 3})
    else:
        # Its own folder for jobs' code (the docstring says why); the head keeps Ray's, where a
        # joining driver writes the code it sends.
        options.update(gcs_address=args.gcs, include_log_monitor=False, runtime_env_dir_name=f"runtime_resources-{args.name or os.getpid()}")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        node = LocalNode(options, head)
    except BaseException:  # Ray gave up (its raylet did not register in 30 s): what it started goes too
        _end_descendants()
        raise
    raylet = node.raylet
    print(f"UP {node.gcs_address} {node.node_id} {raylet.pid}", flush=True)
    def reap_raylet() -> None:  # the moment it ends
        raylet.wait()
        stopping.set()

    threading.Thread(target=reap_raylet, daemon=True).start()
    stopping.wait()
    lost = raylet.poll() is not None
    node.stop(graceful=not lost)
    _end_descendants()
    if lost:
        print(f"local_cluster: node {node.node_id} lost (its raylet ended); its processes were ended", file=sys.stderr, flush=True)
    return 0


def _end_descendants() -> None:
    """Every process still below this one (workers whose raylet is gone, re-parented here): SIGKILL,
    then reaped, so none outlives its node."""
    import psutil

    me = psutil.Process()
    for _ in range(50):
        left = me.children(recursive=True)
        if not left:
            return
        for child in left:
            try:
                child.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=0.2)
        while True:  # orphans re-parented here are our children now: reap them
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


# ---- the cluster ---------------------------------------------------------------------------------

def private_folder() -> tuple[Path, Path]:
    """A fresh 0700 folder and, in it, the cluster's token file (ray_setup/token_folder.py), made
    before any node reads it. The folders of tools killed by SIGKILL, whose nodes have ended with
    them (parent-death signal), are removed first."""
    folder = make_token_folder(CLUSTER_PREFIX)
    return folder, folder / TOKEN_FILE


class Cluster:
    def __init__(self, folder: Path, token: Path) -> None:
        self.folder, self.token = folder, token
        self.nodes: list[tuple[subprocess.Popen[str], dict[str, Any]]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), **{LOCAL_ONLY_VARIABLE: "0"})

    def start_node(self, kind: str, cpus: int, gcs: str | None = None, tries: int = 2, name: str | None = None,
                   private: str | None = None) -> dict[str, Any]:
        """One node (named `name`, or after its place), returned once up. One at a time, and tried
        again once: Ray gives a raylet 30 s to register, which a loaded machine of 2 cores starting
        several at once can miss."""
        name = name or ("head" if kind == "head" else f"node-{len(self.named()) + 1}")
        argv = [sys.executable, str(Path(__file__).resolve()), "--node", kind, "--cpus-per-node", str(cpus), "--folder", str(self.folder),
                "--name", name]
        if gcs is not None:
            argv += ["--gcs", gcs]
        if private is not None:
            argv += ["--private-folder", private]
        for attempt in range(tries):
            # A session of its own: a Ctrl-C at the terminal reaches this tool alone, which stops the nodes in order.
            process = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, text=True, start_new_session=True)
            self.nodes.append((process, {"process_pid": process.pid}))
            line = process.stdout.readline() if process.stdout else ""
            if line.startswith("UP "):
                break
            process.wait()  # it ended what it had started
            if attempt == tries - 1:
                raise RuntimeError(f"a {kind} node did not start (exit {process.returncode}); Ray's logs: {self.folder / 'ray'}")
            print(f"local_cluster: a {kind} node did not start (exit {process.returncode}); trying again", file=sys.stderr, flush=True)
        _, address, node_id, raylet = line.split()
        info = self.nodes[-1][1]
        info.update({"name": name, "node_id": node_id, "raylet_pid": int(raylet), "process_pid": process.pid, "gcs_address": address,
                     "private_folder": private})
        self.write_nodes()
        return info

    def named(self) -> list[dict[str, Any]]:
        return [info for _, info in self.nodes if "name" in info]

    def write_nodes(self) -> None:
        """nodes.json, replaced whole (a reader never sees half of it)."""
        (self.folder / "nodes.tmp").write_text(json.dumps(self.named(), indent=1))
        (self.folder / "nodes.tmp").replace(self.folder / "nodes.json")

    def bring_back(self, cpus: int) -> None:
        """Every lost worker node started again under its name (a new Ray node: a new id, new
        pids), in its place in nodes.json. A lost head is not: the cluster went with it."""
        head = self.named()[0]
        for i, (process, info) in enumerate(list(self.nodes)):
            if info.get("name", "head") == "head" or process.poll() is None:
                continue
            new = self.start_node("worker", cpus, head["gcs_address"], name=info["name"],  # appended, then put in place
                                  private=info.get("private_folder"))
            self.nodes[i] = self.nodes.pop()
            self.write_nodes()
            print(f"local_cluster: {info['name']} is back as node {new['node_id']}", file=sys.stderr, flush=True)

    def reap(self) -> None:
        """Each node process that has ended, reaped at once (not left a zombie until the tool stops)
        and named on stderr."""
        for process, info in self.nodes:
            if process.returncode is None and process.poll() is not None:
                print(f"local_cluster: {info.get('name', 'a starting node')} (pid {process.pid}) ended "
                      f"(exit {process.returncode})", file=sys.stderr, flush=True)

    def stop(self) -> None:
        """Worker nodes first (their raylets report to the head), then the head; each by its pid."""
        for process, _ in reversed(self.nodes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)  # its own session: the node's processes alone
                    process.wait()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.node is not None:
        return run_node(args)
    stop, wake, back = threading.Event(), threading.Event(), threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        (back if signum == signal.SIGUSR1 else stop).set()  # SIGUSR1: bring lost worker nodes back
        wake.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, on_signal)
    signal.signal(signal.SIGCHLD, lambda signum, frame: wake.set())  # a node ended: reaped at once below
    folder, token = private_folder()
    cluster = Cluster(folder, token)
    try:
        head = cluster.start_node("head", args.cpus_per_node)
        for i in range(args.nodes - 1):
            if stop.is_set():
                return 130
            private = args.private_folder if i == args.nodes - 2 else None
            cluster.start_node("worker", args.cpus_per_node, head["gcs_address"], private=private)
        print(f"RAY_ADDRESS={head['gcs_address']}\nRAY_AUTH_TOKEN_PATH={token}\nRAY_AUTH_MODE=token\n"
              f"LOCAL_CLUSTER_NODES={folder / 'nodes.json'}", flush=True)
        print(f"local_cluster: {args.nodes} nodes up, {args.cpus_per_node} CPUs each; SIGTERM or Ctrl-C stops them",
              file=sys.stderr, flush=True)
        while not stop.is_set():
            wake.wait()
            wake.clear()
            cluster.reap()
            if back.is_set() and not stop.is_set():
                back.clear()
                cluster.bring_back(args.cpus_per_node)
        return 0
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
