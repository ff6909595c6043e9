"""Issue #11, reproduced against a real dashboard on 127.0.0.1 with real HTTP requests.

1. DNS rebinding: a request whose Host names another site is refused.
2. Cross-site writes: what a page on another site can send (text/plain, no-cors, a foreign
   Origin) changes nothing.
"""

from __future__ import annotations

import http.client
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import Dashboard

LABML_VERSION = "0.5.3"
MAX_BODY_BYTES = 2 * 1024 * 1024  # dashboard.app.DEFAULT_MAX_BODY_BYTES
MAX_RUN_BYTES = 64 * 1024 * 1024  # dashboard.usage.MAX_RUN_BYTES
SERIES_BYTES = 32 * 1024  # dashboard.usage.SERIES_BYTES
EVIL = "http://rebind.evil.example"


def track_path(run_uuid: str, version: str = LABML_VERSION) -> str:
    return f"/api/v1/default/track?run_uuid={run_uuid}&labml_version={version}"


def new_uuid() -> str:
    return uuid.uuid4().hex


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


def send_json(dashboard: Dashboard, method: str, path: str, value: Any, **headers: str) -> tuple[int, Any]:
    return send(dashboard, method, path, json.dumps(value).encode(), {"Content-Type": "application/json", **headers})


def assert_refused(answer: Any, *fragments: str) -> None:
    """One JSON line, {"error": ...}, naming what was wrong."""
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    assert "\n" not in answer["error"], answer
    for fragment in fragments:
        assert fragment in answer["error"], (fragment, answer)


def run_uuids(dashboard: Dashboard) -> list[str]:
    status, runs = dashboard.request("GET", "/api/v1/runs/null")
    assert status == 200, runs
    return [r["run_uuid"] for r in runs["runs"]]


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


# 2. Cross-site writes


def test_cross_site_requests_cannot_write(dashboard: Dashboard, finished_run: str) -> None:
    attack_uuid = new_uuid()
    attempts = [  # what fetch(url, {method: "POST", mode: "no-cors", body}) from another site sends, and variants
        ("POST", track_path(attack_uuid), {"name": "planted"}),
        ("POST", f"/api/v1/run/{finished_run}", {"name": "renamed"}),
        ("POST", "/api/v1/runs/archive", {"run_uuids": [finished_run]}),
        ("POST", f"/api/v1/hyperparams/{finished_run}", {"learning_rate": 0.001}),
        ("PUT", f"/api/v1/run/{finished_run}/claim", None),
    ]
    for method, path, value in attempts:
        body = None if value is None else json.dumps(value).encode()
        for origin in (EVIL, "null", f"https://127.0.0.1:{dashboard.port}.evil.example"):
            for content_type in ("text/plain", "application/json"):
                status, answer = send(dashboard, method, path, body, {"Content-Type": content_type, "Origin": origin})
                assert status == 403, (path, origin, content_type, status, answer)
                assert_refused(answer, f"Origin {origin!r}")
        if body is None:
            continue
        # Without an Origin (a page cannot leave it out) a body must still be JSON.
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
            headers = {} if content_type is None else {"Content-Type": content_type}
            status, answer = send(dashboard, method, path, body, headers)
            assert status == 415, (path, content_type, status, answer)
            assert_refused(answer, "Content-Type", "expected application/json")

    # Nothing changed: no planted run, the run keeps its name and folder, nothing queued.
    assert dashboard.request("GET", f"/api/v1/run/{attack_uuid}")[0] == 404
    listed = run_uuids(dashboard)
    assert finished_run in listed and attack_uuid not in listed
    assert dashboard.request("GET", f"/api/v1/run/{finished_run}")[1]["name"] == "probe"
    info = dashboard.request("GET", f"/api/v1/hyperparams/{finished_run}")[1]
    assert info["params"]["learning_rate"]["pending"] is None


def test_same_origin_and_origin_less_writes_work(dashboard: Dashboard, finished_run: str) -> None:
    port = dashboard.port
    for origin, host in [(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}"), (f"http://localhost:{port}", f"localhost:{port}"),
                         (f"http://[::1]:{port}", f"[::1]:{port}")]:
        status, answer = send_json(dashboard, "POST", f"/api/v1/run/{finished_run}", {"comment": origin},
                                   Origin=origin, Host=host)
        assert status == 200, (origin, answer)
        assert dashboard.request("GET", f"/api/v1/run/{finished_run}")[1]["comment"] == origin
    # labml's client and experiments.tweak send no Origin (the probe run and test_live_run show both work).
    status, answer = send_json(dashboard, "POST", f"/api/v1/run/{finished_run}", {"comment": ""})
    assert status == 200, answer
