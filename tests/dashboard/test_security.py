"""Issue #11 item 1, reproduced against a real dashboard on 127.0.0.1 with real HTTP requests.

DNS rebinding: a request whose Host names another site is refused.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import Dashboard


def send(dashboard: Dashboard, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """A request with exactly these headers (plus Host, unless given) → (status, parsed JSON or text)."""
    headers = dict(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", dashboard.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if "Host" not in headers:
            headers["Host"] = f"127.0.0.1:{dashboard.port}"
        if body is not None:
            headers.setdefault("Content-Length", str(len(body)))
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        status, content = response.status, response.read()
    finally:
        conn.close()
    text = content.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def assert_refused(answer: Any, *fragments: str) -> None:
    """One JSON line, {"error": ...}, naming what was wrong."""
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    assert "\n" not in answer["error"], answer
    for fragment in fragments:
        assert fragment in answer["error"], (fragment, answer)


# 1. DNS rebinding


@pytest.mark.parametrize("host", ["rebind.evil.example:{port}", "rebind.evil.example", "127.0.0.1.evil.example:{port}",
                                  "localhost.evil.example", "evil.example@127.0.0.1:{port}", "127.0.0.1:{port}:80", ""])
def test_foreign_host_names_are_refused(dashboard: Dashboard, finished_run: str, host: str) -> None:
    host = host.format(port=dashboard.port)
    for method, path, body in [("GET", "/api/v1/runs/null", None), ("GET", f"/api/v1/run/{finished_run}", None),
                               ("GET", "/", None),
                               ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"learning_rate": 0.001}')]:
        headers = {"Host": host, "Content-Type": "application/json"}
        status, answer = send(dashboard, method, path, body, headers)
        assert status == 421, (host, path, status, answer)
        assert_refused(answer, f"Host {host!r}", "127.0.0.1, [::1], localhost")
    # The refused change was not queued.
    assert dashboard.request("GET", f"/api/v1/hyperparams/{finished_run}")[1]["params"]["learning_rate"]["pending"] is None


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "127.0.0.1", "localhost:{port}", "LOCALHOST", "localhost.",
                                  "[::1]:{port}", "[::1]"])
def test_loopback_names_are_answered(dashboard: Dashboard, host: str) -> None:
    status, answer = send(dashboard, "GET", "/api/v1/runs/null", headers={"Host": host.format(port=dashboard.port)})
    assert status == 200 and "runs" in answer


def test_allowed_host_adds_a_name(tmp_path: Path, no_leftover_processes: None) -> None:
    d = Dashboard(tmp_path, options=("--allowed-host", "dashboard.example.test", "--allowed-host", "10.1.2.3"))
    try:
        d.wait_ready()
        for host in ("dashboard.example.test", "Dashboard.Example.Test:443", "10.1.2.3:8080", f"127.0.0.1:{d.port}"):
            assert send(d, "GET", "/api/v1/runs/null", headers={"Host": host})[0] == 200, host
        status, answer = send(d, "GET", "/api/v1/runs/null", headers={"Host": "other.example.test"})
        assert status == 421
        assert_refused(answer, "10.1.2.3, 127.0.0.1, [::1], dashboard.example.test, localhost")
    finally:
        d.kill()
