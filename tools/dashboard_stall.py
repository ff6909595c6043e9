"""How long an ordinary run waits on a real dashboard while hostile clients push at it.

    python tools/dashboard_stall.py                  # 4 hostile clients, 30 ordinary updates
    python tools/dashboard_stall.py --hostile 0      # the same run alone: the baseline

Starts `python -m experiments.dashboard` from the checkout this script lies in (or `--repo`) on a
free loopback port with a fresh data folder, then: one ordinary run posts labml-like updates to
`/track` one after another and reads its run's record after each (`GET /api/v1/run/<uuid>`, what
a run page asks for), while `--hostile` clients post, as fast as they are answered, packets that
make the store keep as much as a request can carry (issue 50): ``hp.*`` series, 6,500 names of
256 characters per packet, and one series whose name is 1.9 MB.  It prints the latency
percentiles of both requests, the hostile answers by status and the store's size on disk, as one
JSON line.  A `/track` is answered no sooner than the dashboard's hold
(`dashboard.handlers.TRACK_THROTTLE_S`); the page request has none.

It imports nothing of the project, so the same file measures an older checkout (`--repo`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

TRACK = "/api/v1/default/track?run_uuid={run}&labml_version=0.5.3"
START_LIMIT_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request(port: int, method: str, path: str, body: Any = None) -> tuple[int, float]:
    """(status, seconds until the whole answer was read); `body` is JSON, or bytes of it."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - started
    finally:
        conn.close()


def hostile_packets(client: int) -> list[bytes]:
    """Two bodies of about 1.9 MB each (the dashboard takes up to 2 MiB), encoded once."""
    point = {"step": [1], "value": [1.0]}
    many = {"track": {f"hp.{client}.{j}".ljust(256, "x"): point for j in range(6500)}}
    long_name = {"track": {f"hp.{client}.".ljust(1_900_000, "y"): point}}
    return [json.dumps(many).encode(), json.dumps(long_name).encode()]


def percentiles(seconds: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return {"p50": round(cuts[49], 3), "p90": round(cuts[89], 3), "p99": round(cuts[98], 3),
            "max": round(max(seconds), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hostile", type=int, default=4, help="hostile clients (default: 4)")
    parser.add_argument("--updates", type=int, default=30, help="the ordinary run's updates (default: 30)")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose dashboard is measured (default: this one)")
    args = parser.parse_args()
    if args.hostile < 0 or args.updates < 2:
        parser.error("--hostile must be 0 or more and --updates 2 or more")

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dashboard-stall-") as data:
        server = subprocess.Popen([sys.executable, "-m", "experiments.dashboard", "--port", str(port), "--data", data],
                                  cwd=args.repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            result = measure(port, Path(data), server, args.hostile, args.updates)
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    print(json.dumps(result))
    return 0


def wait_ready(server: subprocess.Popen[str]) -> None:
    assert server.stdout is not None
    deadline = time.monotonic() + START_LIMIT_S
    for line in server.stdout:
        if line.startswith("Dashboard running at"):
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep its pipe drained
            return
        if time.monotonic() > deadline:
            break
    raise SystemExit(f"the dashboard did not start (exit code {server.poll()})")


def measure(port: int, data: Path, server: subprocess.Popen[str], hostile: int, updates: int) -> dict[str, Any]:
    wait_ready(server)
    run = uuid.uuid1().hex
    status, _ = request(port, "POST", TRACK.format(run=run), {"name": "ordinary", "configs": {}})
    if status != 200:
        raise SystemExit(f"the ordinary run's first update was answered {status}")
    stop = threading.Event()
    answers: Counter[int] = Counter()
    answered = threading.Semaphore(0)  # one release per pusher, at its first answer

    def push(client: int) -> None:
        packets, target = hostile_packets(client), uuid.uuid1().hex
        i = 0
        while not stop.is_set():
            answers[request(port, "POST", TRACK.format(run=target), packets[i % len(packets)])[0]] += 1
            if i == 0:
                answered.release()
            i += 1

    pushers = [threading.Thread(target=push, args=(client,), daemon=True) for client in range(hostile)]
    for pusher in pushers:
        pusher.start()
    track, page = [], []
    try:
        for _ in pushers:  # measure only once every hostile client is pushing
            if not answered.acquire(timeout=START_LIMIT_S):
                raise SystemExit("a hostile client got no answer")
        for step in range(1, updates + 1):
            status, seconds = request(port, "POST", TRACK.format(run=run),
                                      {"track": {"loss": {"step": [step], "value": [1.0 / step]}}, "time": time.time()})
            if status != 200:
                raise SystemExit(f"the ordinary run's update {step} was answered {status}")
            track.append(seconds)
            page.append(request(port, "GET", f"/api/v1/run/{run}")[1])
    finally:
        stop.set()
        for pusher in pushers:
            pusher.join()
    store = sum(path.stat().st_size for path in data.rglob("*") if path.is_file())
    return {"hostile_clients": hostile, "updates": updates, "track_s": percentiles(track), "page_s": percentiles(page),
            "hostile_answers": dict(sorted(answers.items())), "store_bytes": store}


if __name__ == "__main__":
    sys.exit(main())
