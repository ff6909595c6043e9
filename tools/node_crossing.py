"""What crossing nodes costs: env-worker actors spread over a Ray cluster's nodes, the same actors all on one node, and local pipes, measured in one run.

    python tools/node_crossing.py                                  # starts a local cluster of 3 nodes itself
    python tools/node_crossing.py --ray-address 10.0.0.5:6379      # a cluster of yours (its token as docs/ray.md says)

Three layouts of the same games (`--actors` × `--envs-per-actor` Breakout games, random actions),
one after another, each through the project's own pool (game/vector/pool.py):

* `ray_spread`: Ray actors (`RayPool`) pinned round-robin to every node of the cluster, the node
  this driver joined through first, so at least 2 nodes are used;
* `ray_one_node`: as many actors, all pinned to that one node;
* `pipes`: worker processes on this machine, over pipes and shared memory (`PipePool`).

The actors of both Ray layouts start together, in one pool, and each layout is measured while
the other's actors wait idle. Each is measured for `--duration` seconds after a warm-up: `env_sps`, env steps per second of real
Breakout steps; `step_us`, the time of one step of every game (the barrier a training step
waits on); `roundtrip_us`, one request to one worker that does no game work and its answer, one
worker at a time; `roundtrip_all_us`, the same to every worker at once. Actors are placed with
Ray's hard node affinity and each reports the node it ran on: `actor_nodes` names them.

Without `--ray-address` it starts tools/local_cluster.py (`--nodes`, `--cpus-per-node`) and stops
it at the end: its nodes share this machine's cores, so it shows what crossing a node's boundary
costs in messaging (another raylet and object store), not what more machines gain. Prints one JSON
object on stdout; what it does, and a table, on stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROG = "python tools/node_crossing.py"
LAYOUTS = ("ray_spread", "ray_one_node", "pipes")


_STARTED = time.monotonic()


def say(line: str) -> None:
    print(f"[{time.monotonic() - _STARTED:5.1f} s] {line}", file=sys.stderr, flush=True)


def parse(argv: Sequence[str] | None) -> Any:
    from configs.cli import OneLineParser, docstring_help, float_in, int_in

    parser = OneLineParser(prog=PROG, description=docstring_help(__doc__)[0])
    parser.add_argument("--ray-address", metavar="ADDRESS",
                        help="a running cluster to join: HOST:PORT, or auto (RAY_ADDRESS); none: a local cluster started here")
    parser.add_argument("--nodes", type=int_in(2, 16), default=3, metavar="N",
                        help="the local cluster's nodes, 2 to 16 (default: 3; without --ray-address)")
    parser.add_argument("--cpus-per-node", type=int_in(1, 64), default=1, metavar="C",
                        help="the local cluster's CPUs per node, 1 to 64 (default: 1; without --ray-address)")
    parser.add_argument("--actors", type=int_in(2, 64), default=2, metavar="N",
                        help="workers in each layout, 2 to 64 (default: 2, the default run's grouping on 2 cores)")
    parser.add_argument("--envs-per-actor", type=int_in(1, 16), default=4, metavar="K",
                        help="games each worker steps, 1 to 16 (default: 4)")
    parser.add_argument("--duration", type=float_in(0.0, 600.0, low_open=True), default=5.0, metavar="SECONDS",
                        help="seconds timed per layout's stepping, after a warm-up, > 0 and ≤ 600 (default: 5)")
    args = parser.parse_args(argv)
    if args.ray_address is not None:
        import re

        from configs.refusals import bad_value

        if not re.fullmatch(r"auto|[^\s:/]+:\d{1,5}", args.ray_address):
            bad_value("--ray-address", args.ray_address, "auto or HOST:PORT, a Ray cluster's GCS address")
        if args.ray_address == "auto" and not os.environ.get("RAY_ADDRESS"):
            bad_value("--ray-address", "auto", "RAY_ADDRESS set to the cluster's address")
    return args


# ---- the cluster -------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """In the local cluster's process, before it runs: a SIGTERM when this tool ends, however it ends."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def local_cluster(nodes: int, cpus: int) -> Iterator[dict[str, str]]:
    """tools/local_cluster.py, running until the block ends; yields what it printed (NAME=value)."""
    argv = [sys.executable, str(REPO / "tools" / "local_cluster.py"), "--nodes", str(nodes), "--cpus-per-node", str(cpus)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
    try:
        exports: dict[str, str] = {}
        while "LOCAL_CLUSTER_NODES" not in exports:  # its last line, once every node is up
            line = process.stdout.readline() if process.stdout else ""
            if not line:
                raise RuntimeError(f"the local cluster did not start (exit {process.wait()})")
            name, _, value = line.strip().partition("=")
            exports[name] = value
        yield exports
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # it stops its nodes, by pid, and removes its folder
        try:
            process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cluster_nodes(ray: Any) -> list[dict[str, Any]]:
    """The alive nodes that offer CPUs, the one this driver joined through first."""
    here = ray.get_runtime_context().get_node_id()
    nodes = [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "cpus": n["Resources"].get("CPU", 0.0)}
             for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0.0) > 0]
    return sorted(nodes, key=lambda n: n["node_id"] != here)


# ---- the measures ------------------------------------------------------------------------------

def measure(pool: Any, workers: range, duration: float) -> dict[str, Any]:
    """Stepping (random actions) and round trips of `pool`'s `workers`, the others idle; their
    nodes where they have some."""
    import numpy as np

    from experiments.timing import timed_rate, warmup_seconds

    warmup = warmup_seconds(duration)
    pool.reset()
    n_envs = len(workers) * pool.envs_per_worker
    actions = np.random.default_rng(0).integers(0, pool.n_actions, (256, n_envs), dtype=np.int32)
    steps = [0]

    def step() -> None:
        pool.step_async(actions[steps[0] % len(actions)], workers)
        pool.step_wait(workers)
        steps[0] += 1

    sps = timed_rate(step, n_envs, duration, warmup)["rate"]
    turn = [0]

    def one() -> None:  # one worker at a time, each in turn: every node's round trip counts
        pool.ping([workers[turn[0] % len(workers)]])
        turn[0] += 1

    one_rate = timed_rate(one, 1, min(duration, 1.0), min(warmup, 0.2))["rate"]
    all_rate = timed_rate(lambda: pool.ping(workers), 1, min(duration, 1.0), min(warmup, 0.2))["rate"]
    nodes = [pool.worker_info()[w].get("node_id") for w in workers]
    return {"env_sps": sps, "step_us": 1e6 * n_envs / sps, "roundtrip_us": 1e6 / one_rate,
            "roundtrip_all_us": 1e6 / all_rate, "actor_nodes": nodes if None not in nodes else [],
            "nodes_used": len(set(nodes)) if None not in nodes else 1,
            "worker_pids": [pool.worker_pids()[w] for w in workers]}


def run(args: Any, address: str, started_here: bool) -> dict[str, Any]:
    from configs.ppo import PPOConfig
    from configs.refusals import fail
    from game.vector import PipePool, game_specs
    from game.vector.ray_actors import RayPool
    from ray_setup.connection import RayConnection

    n, k = args.actors, args.envs_per_actor
    say(f"joining the cluster at {address} …")
    packages = [str(REPO / "game"), str(REPO / "ray_setup")]
    with RayConnection(address, runtime_env={"py_modules": packages}, configure_logging=True) as connection:  # left at the end
        nodes = cluster_nodes(connection.ray)
        if len(nodes) < 2:
            fail(f"--ray-address {address}: expected a cluster of 2 nodes or more with CPUs, to spread actors over "
                 f"(it has {len(nodes)})")
        # One pool of 2n actors, started together: workers 0..n-1 pinned round-robin to every node
        # (the one joined through first), workers n..2n-1 all pinned to that first node. Each
        # layout is measured while the other's actors wait idle for their next call.
        placement = [nodes[w % len(nodes)]["node_id"] for w in range(n)] + [nodes[0]["node_id"]] * n
        cpus_of = {node["node_id"]: node["cpus"] for node in nodes}
        # The same reservation for every actor, small enough for them all to fit where they are
        # pinned: where an actor runs is its pin's doing, and it runs one thread whatever it reserves.
        cpus = min(1.0, *(cpus_of[node] / placement.count(node) for node in set(placement)))
        say(f"{2 * n} actors × {k} games, {cpus:.3g} CPU each: {n} over {len(set(placement[:n]))} nodes, {n} on one node …")
        result: dict[str, Any] = {}
        with RayPool(game_specs(PPOConfig(), range(2 * n * k)), k, timeout_s=120.0, cpus_per_worker=cpus, nodes=placement) as pool:
            for layout, workers in (("ray_spread", range(n)), ("ray_one_node", range(n, 2 * n))):
                say(f"{layout} …")
                result[layout] = measure(pool, workers, args.duration)
        say(f"pipes: {n} worker processes × {k} games on this machine …")
        with PipePool(game_specs(PPOConfig(), range(n * k)), k, timeout_s=120.0) as pipes:
            result["pipes"] = measure(pipes, range(n), args.duration)
    pipes_us = result["pipes"]["step_us"]
    return {
        **result,
        "actors": n, "envs_per_actor": k, "cpus_per_actor": cpus, "duration_s": args.duration,
        "crossing_us_per_step": result["ray_spread"]["step_us"] - result["ray_one_node"]["step_us"],
        "ray_one_node_us_per_step_over_pipes": result["ray_one_node"]["step_us"] - pipes_us,
        "ray_spread_us_per_step_over_pipes": result["ray_spread"]["step_us"] - pipes_us,
        "ray_spread_fraction_of_pipes": result["ray_spread"]["env_sps"] / result["pipes"]["env_sps"],
        "ray_one_node_fraction_of_pipes": result["ray_one_node"]["env_sps"] / result["pipes"]["env_sps"],
        "cluster": {"address": address, "started_here": started_here, "nodes": nodes,
                    # nodes on loopback addresses share this machine's cores: no gain from more of them
                    "one_machine": all(n["address"].startswith("127.") for n in nodes)},
        "cpu_count": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def table(r: dict[str, Any]) -> str:
    names = {n["node_id"]: f"{n['node_id'][:8]}@{n['address']}" for n in r["cluster"]["nodes"]}
    lines = [f"{r['actors']} workers × {r['envs_per_actor']} games each, {r['duration_s']:g} s a layout"
             + (f"; every node shares this machine's {r['cpu_count']} cores" if r["cluster"]["one_machine"] else ""),
             f"{'layout':<14}{'env steps/s':>12}{'step µs':>10}{'round trip µs':>15}{'to all µs':>11}  nodes"]
    for layout in LAYOUTS:
        m = r[layout]
        where = ", ".join(names.get(n, n) for n in m["actor_nodes"]) or "this machine"
        lines.append(f"{layout:<14}{m['env_sps']:>12,.0f}{m['step_us']:>10,.0f}{m['roundtrip_us']:>15,.0f}"
                     f"{m['roundtrip_all_us']:>11,.0f}  {where}")
    lines.append(f"crossing nodes costs {r['crossing_us_per_step']:,.0f} µs a step over one node; Ray on one node "
                 f"{r['ray_one_node_us_per_step_over_pipes']:,.0f} µs over pipes")
    return "\n".join(lines)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    from configs.refusals import fail
    from ray_setup.installed import ray_refusal
    from ray_setup.joining import cluster_refusal

    if (refusal := ray_refusal("node crossing measures")) is not None:
        fail(refusal)
    signal.signal(signal.SIGTERM, _interrupted)  # as a Ctrl-C: every pool, the Ray connection and the cluster closed
    started = time.perf_counter()
    try:
        if args.ray_address is not None:
            address = os.environ["RAY_ADDRESS"] if args.ray_address == "auto" else args.ray_address
            if (refusal := cluster_refusal(address)) is not None:
                fail(refusal)
            result = run(args, address, started_here=False)
        else:
            say(f"starting a local cluster of {args.nodes} nodes, {args.cpus_per_node} CPU(s) each (tools/local_cluster.py) …")
            with local_cluster(args.nodes, args.cpus_per_node) as exports:
                for name in [n for n in os.environ if n.startswith("RAY_")]:
                    del os.environ[name]  # this cluster's token and mode, not another's
                os.environ.update({k: v for k, v in exports.items() if k.startswith("RAY_")})
                result = run(args, exports["RAY_ADDRESS"], started_here=True)
    except KeyboardInterrupt:
        say("stopped: nothing measured")
        return 130
    except RuntimeError as e:  # a worker that failed (the pool's errors), a cluster that did not start
        fail(str(e).splitlines()[0], code=1)
    result["wall_s"] = time.perf_counter() - started
    say(table(result))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # run as a script: our packages are imported from this checkout
    sys.exit(main(sys.argv[1:]))
