"""Issue #11, reproduced against a real dashboard on 127.0.0.1 with real HTTP requests.

1. DNS rebinding: a request whose Host names another site is refused.
2. Cross-site writes: what a page on another site can send (text/plain, no-cors, a foreign
   Origin) changes nothing; a run's declared live-hyperparameter ranges cannot be rewritten.
3. Lasting denial of service: unstorable input is refused at ingestion, and no refused request
   breaks a later one, also after a restart.
4. Large posts: refused past the body cap before they are read; the server answers others while
   a large post trickles in; a run cannot store past its cap.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import Dashboard, finished_probe_run

LABML_VERSION = "0.5.3"
MAX_BODY_BYTES = 2 * 1024 * 1024  # dashboard.app.DEFAULT_MAX_BODY_BYTES
MAX_RUN_BYTES = 64 * 1024 * 1024  # dashboard.usage.MAX_RUN_BYTES
SERIES_BYTES = 32 * 1024  # dashboard.usage.SERIES_BYTES
RUN_BYTES = 8 * 1024  # dashboard.usage.RUN_BYTES
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


def series_names(dashboard: Dashboard, run_uuid: str) -> set[str]:
    status, metrics = dashboard.request("POST", f"/api/v1/metrics/{run_uuid}", {"get_all": True})
    assert status == 200, metrics
    return {s["name"] for s in metrics["series"]}


def live_ranges(dashboard: Dashboard, run_uuid: str) -> dict[str, list[float]]:
    status, info = dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")
    assert status == 200, info
    return {key: p["range"] for key, p in info["params"].items()}


PROBE_RANGES = {"learning_rate": [0.0, 0.01], "clip_range": [0.0, 0.5], "entropy_coef": [0.0, 0.1],
                "value_coef": [0.0, 2.0], "epochs": [1, 16]}  # tests/dashboard/probe_run.py


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



def test_the_front_ends_own_writes_pass(dashboard: Dashboard, finished_run: str) -> None:
    """What labml-app's front-end sends (its bundle's request bodies), from its own origin, is accepted."""
    run = finished_run
    origin = f"http://127.0.0.1:{dashboard.port}"
    # The comparison's preferences as the page loads them, once it has drawn the comparison.
    assert send_json(dashboard, "POST", f"/api/v1/compare/metrics/{run}?current={run}", {"get_all": True},
                     Origin=origin)[0] == 200
    status, stored = dashboard.request("GET", f"/api/v1/compare/preferences/{run}")
    assert status == 200, stored
    preferences = {"series_preferences": [1], "chart_type": 0, "step_range": [-1, -1], "focus_smoothed": True,
                   "series_names": ["loss"], "smooth_value": 0.5, "smooth_function": "exponential"}
    writes: list[tuple[str, str, Any]] = [
        ("POST", f"/api/v1/metrics/{run}?current=", {"get_all": False}),
        ("POST", f"/api/v1/metrics/preferences/{run}", preferences),
        # The stored preferences sent back with a change, without names (same length: none needed).
        ("POST", f"/api/v1/metrics/preferences/{run}", {k: v for k, v in preferences.items() if k != "series_names"}),
        # updateBaseExperiment and deleteBaseExperiment send the stored preferences back, without names.
        ("POST", f"/api/v1/compare/preferences/{run}", {**stored, "base_experiment": run, "base_series_preferences": [],
                                                        "base_series_names": [], "is_base_distributed": False}),
        ("POST", f"/api/v1/compare/preferences/{run}", {**stored, "base_experiment": "", "base_series_preferences": [],
                                                        "base_series_names": []}),
        ("POST", f"/api/v1/logs/stdout/{run}", {"page": -1}),
        ("POST", f"/api/v1/logs/stdout/{run}/opt", {"wrap_logs": False}),
        ("POST", f"/api/v1/run/{run}", {"note": "a note", "favourite_configs": ["gamma"], "selected_configs": []}),
        ("PUT", f"/api/v1/run/{run}/add", {}),
        ("PUT", f"/api/v1/run/{run}/claim", {}),
        ("POST", "/api/v1/auth/user", {"device": {"userAgent": "test", "platform": "linux"}}),
        ("POST", "/api/v1/user", {"user": {"theme": "dark", "name": "local"}}),
        ("POST", "/api/v1/runs/archive", {"run_uuids": [run]}),
        ("POST", "/api/v1/runs/unarchive", {"run_uuids": [run]}),
    ]
    for method, path, value in writes:
        status, answer = send_json(dashboard, method, path, value, Origin=origin)
        assert status == 200, (method, path, answer)
    status, metric = send_json(dashboard, "POST", f"/api/v1/custom_metrics/{run}/create", {"name": "m", "description": ""},
                               Origin=origin)
    assert status == 200 and metric["name"] == "m", metric
    for path, value in [(f"/api/v1/custom_metrics/{run}", {"id": metric["id"], "name": "m2", "preferences": preferences}),
                        (f"/api/v1/custom_metrics/{run}/delete", {"id": metric["id"]})]:
        assert send_json(dashboard, "POST", path, value, Origin=origin)[0] == 200, path
    assert run in run_uuids(dashboard)
    status, page = dashboard.request("GET", f"/api/v1/run/{run}")
    assert status == 200 and page["note"] == "a note" and page["favourite_configs"] == ["gamma"]

def test_declared_live_ranges_cannot_be_rewritten(dashboard: Dashboard, finished_run: str) -> None:
    assert live_ranges(dashboard, finished_run) == PROBE_RANGES
    dynamic = {"type": "DynamicSchedule", "default": 0.1, "range": [-100, 100], "dynamic_type": "float"}
    cases = [
        ({"learning_rate": {"name": "learning_rate", "computed": dynamic}}, "configs.learning_rate",
         "float in [0.0, 0.01], default 0.00025"),  # widened
        ({"learning_rate": {"name": "learning_rate", "computed": 0.5}}, "configs.learning_rate",
         "got no live hyperparameter"),  # made static, so the run would lose it
        ({"gamma": {"name": "gamma", "computed": {**dynamic, "range": [0, 1]}}}, "configs.gamma",
         "declared no live hyperparameter"),  # added
        ({"alias": {"name": "epochs", "computed": {**dynamic, "dynamic_type": "int", "default": 4, "range": [1, 1000]}}},
         "configs.alias", "declared no live hyperparameter"),  # a new key naming a declared one
    ]
    for configs, field, reason in cases:
        # As a local process would send it: JSON, no Origin.
        status, answer = send_json(dashboard, "POST", track_path(finished_run), {"configs": configs})
        assert status == 400, (configs, status, answer)
        assert_refused(answer, f"field {field}", reason)
    assert live_ranges(dashboard, finished_run) == PROBE_RANGES
    status, answer = dashboard.request("POST", f"/api/v1/hyperparams/{finished_run}", {"learning_rate": 50})
    assert status == 422 and "expected a value in [0, 0.01]" in answer["error"]

    # labml's client may send the same declarations again: accepted.
    status, run = dashboard.request("GET", f"/api/v1/run/{finished_run}")
    # The page shows a live value as `computed`; labml sends `computed` equal to `value` (both its
    # to_yaml of the same config), so `value` gives back what it sent.
    same = {c["key"]: {**{k: v for k, v in c.items() if k != "key"}, "computed": c["value"]} for c in run["configs"]}
    assert send_json(dashboard, "POST", track_path(finished_run), {"configs": same})[0] == 200


def test_malformed_live_range_declarations_are_refused(dashboard: Dashboard) -> None:
    for computed in [{"type": "DynamicSchedule", "default": 5, "range": [0, 1], "dynamic_type": "float"},
                     {"type": "DynamicSchedule", "default": 0.5, "range": [1, 0], "dynamic_type": "float"},
                     {"type": "DynamicSchedule", "default": 0.5, "range": [0, 1], "dynamic_type": "complex"},
                     {"type": "DynamicSchedule", "default": 0.5, "range": [0, True], "dynamic_type": "float"}]:
        run_uuid = new_uuid()
        status, answer = send_json(dashboard, "POST", track_path(run_uuid),
                                   {"name": "x", "configs": {"lr": {"name": "lr", "computed": computed}}})
        assert status == 400, (computed, answer)
        assert_refused(answer, "field configs.lr.computed", "expected a DynamicSchedule")
        assert dashboard.request("GET", f"/api/v1/run/{run_uuid}")[0] == 404


# 3. Lasting denial of service


def bad_requests(run_uuid: str) -> list[tuple[str, str, bytes, int, tuple[str, ...]]]:
    """(method, path, body, status, fragments of the message) of each unstorable request."""
    fresh = new_uuid()
    packet = json.dumps({"name": "x", "pid": 1}).encode()
    return [
        ("POST", track_path(fresh), b'{"name": "x \\ud800"}', 400, ("field name", "lone surrogate")),
        ("POST", track_path(fresh), b'[{"time": 1}, {"name": "\\udfff"}]', 400, ("field [1].name", "lone surrogate")),
        ("POST", track_path(fresh), b'{"tags": ["ok", "\\ud83d"]}', 400, ("field tags[1]", "lone surrogate")),
        ("POST", track_path(fresh), b'{"indicators": {"\\ud800": {}}}', 400, ("field indicators", "lone surrogate")),
        ("POST", f"/api/v1/run/{run_uuid}", b'{"name": "x \\ud800"}', 400, ("field name", "lone surrogate")),
        ("POST", track_path(fresh), b"\xed\xa0\x80", 400, ("not UTF-8",)),
        ("POST", track_path(fresh), b'{"configs": {"a": {"name": "a", "computed": NaN}}}', 400,
         ("field configs.a.computed", "NaN is not allowed")),
        ("POST", track_path(fresh), b'{"configs": {"a": {"name": "a", "computed": -Infinity}}}', 400, ("-Infinity",)),
        ("POST", track_path(fresh), b'{"track": {"loss": {"step": [1], "value": [1e400]}}}', 400,
         ("field track.loss.value[0]", "1e400 is out of range")),
        ("POST", f"/api/v1/run/{run_uuid}", b'{"comment": Infinity}', 400, ("field comment", "Infinity")),
        ("POST", track_path(fresh), b"[" * 100_000 + b"]" * 100_000, 400, ("nested deeper than 32 levels",)),
        ("POST", track_path(fresh), b"[" * 40 + b"]" * 40, 400, ("nested deeper than 32 levels",)),
        ("POST", track_path(fresh), b'{"pid": ' + b"9" * 5000 + b"}", 400, ("field pid", "5000 digits")),
        ("POST", track_path(fresh), b'{"pid": 9223372036854775808}', 400, ("field pid", "64-bit integer")),
        ("POST", track_path(fresh, "x.y"), packet, 400, ("labml_version='x.y'", "0.5.3")),
        ("POST", track_path(fresh, ""), packet, 400, ("labml_version=''",)),
        ("POST", track_path("short"), packet, 400, ("run_uuid='short'",)),
        ("POST", track_path(fresh + "_x"), packet, 400, ("run_uuid=",)),
        # Types labml-app would store and then fail on when showing the run.
        ("POST", track_path(fresh), b'{"commit": 5, "repo_remotes": ["git@host:repo.git"]}', 400,
         ("field commit", "expected a string, got 5")),
        ("POST", track_path(fresh), b'{"track": {"loss": {"step": [], "value": []}}}', 400, ("field track.loss.step",)),
        ("POST", track_path(fresh), b'{"track": {"loss": {"step": [1, 2], "value": [1]}}}', 400,
         ("field track.loss", "as many of each")),
        ("POST", f"/api/v1/run/{run_uuid}", b'{"favourite_configs": 5}', 400, ("field favourite_configs",)),
        ("POST", "/api/v1/user", b'{"user": {"theme": ["dark"]}}', 400, ("field user.theme",)),
        # Preferences of another length than the stored ones (one series) need the series' names.
        ("POST", f"/api/v1/metrics/preferences/{run_uuid}", b'{"series_preferences": [1, 1]}', 400,
         ("field series_names is missing", "series_preferences has 2 items and the stored preferences 1")),
        # Requests labml-app answered with a 500.
        ("PUT", "/api/v1/runs", b"{}", 400, ("field run_uuids is missing",)),
        ("POST", "/api/v1/runs/archive", b"[]", 400, ("the body: expected an object",)),
        ("POST", f"/api/v1/metrics/{run_uuid}", b"{}", 400, ("field get_all is missing",)),
        ("POST", f"/api/v1/compare/metrics/{run_uuid}", b'{"get_all": true}', 400, ("query parameter current is missing",)),
        ("POST", f"/api/v1/custom_metrics/{run_uuid}/create", b"{}", 400, ("field name is missing",)),
        ("POST", f"/api/v1/logs/stdout/{run_uuid}", b"[]", 400, ("the body: expected an object",)),
        ("POST", f"/api/v1/compare/preferences/{run_uuid}",
         json.dumps({"series_preferences": [], "series_names": [], "base_experiment": fresh}).encode(), 404,
         (f"unknown run in field base_experiment {fresh}",)),
        ("POST", f"/api/v1/run/{fresh}", b'{"name": "x"}', 404, (f"unknown run {fresh}",)),
        ("PUT", f"/api/v1/run/{fresh}/claim", b"{}", 404, (f"unknown run {fresh}",)),
        ("POST", f"/api/v1/metrics/{fresh}", b'{"get_all": true}', 404, (f"unknown run {fresh}",)),
    ]


def assert_store_intact(dashboard: Dashboard, run_uuid: str) -> None:
    """The runs list, the run's page and its metrics all answer, and only the real run is there."""
    assert run_uuids(dashboard) == [run_uuid]
    status, run = dashboard.request("GET", f"/api/v1/run/{run_uuid}")
    assert status == 200 and run["name"] == "probe" and run["comment"] == ""
    assert dashboard.request("GET", f"/api/v1/run/status/{run_uuid}")[0] == 200
    assert series_names(dashboard, run_uuid) == {"loss"}
    assert dashboard.request("POST", f"/api/v1/logs/stdout/{run_uuid}", {"page": -1})[0] == 200


def test_unstorable_input_is_refused_and_breaks_nothing(tmp_path: Path, no_leftover_processes: None) -> None:
    data = tmp_path / "data"
    first = Dashboard(data)
    try:
        first.wait_ready()
        run_uuid, _ = finished_probe_run(first.url, tmp_path / "probe", "5")
        assert_store_intact(first, run_uuid)
        for method, path, body, expected, fragments in bad_requests(run_uuid):
            status, answer = send(first, method, path, body, {"Content-Type": "application/json"})
            assert status == expected, (method, path, body[:80], status, answer)
            assert_refused(answer, *fragments)
            assert_store_intact(first, run_uuid)
        assert first.terminate() == 0
    finally:
        first.kill()

    # Nothing that was refused comes back to haunt a restarted dashboard.
    second = Dashboard(data)
    try:
        second.wait_ready()
        assert_store_intact(second, run_uuid)
    finally:
        second.kill()


def test_chunked_body_past_the_cap_gets_a_413(dashboard: Dashboard, finished_run: str) -> None:
    attack_uuid = new_uuid()
    for path in (track_path(attack_uuid), f"/api/v1/run/{finished_run}"):
        with socket.create_connection(("127.0.0.1", dashboard.port), timeout=60) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{dashboard.port}\r\n"
                         f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
            # One byte past the cap, and no more: the server has read all we sent when it answers.
            data = b"[" + b"0," * (MAX_BODY_BYTES // 2)
            sock.sendall(f"{len(data):x}\r\n".encode() + data)
            status_line, answer = read_response(sock)
        assert status_line.startswith("HTTP/1.1 413"), status_line
        assert_refused(answer, f"larger than {MAX_BODY_BYTES} bytes")
    assert attack_uuid not in run_uuids(dashboard)


def read_response(sock: socket.socket) -> tuple[str, Any]:
    """(status line, parsed JSON body) of a response the server ends by closing the connection or by its length."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {raw!r}"
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-body: {raw!r}"
        body += chunk
    return head.split(b"\r\n")[0].decode(), json.loads(body)


# 4. Large posts and the per-run cap


def test_a_post_past_the_cap_is_refused_before_it_is_read(dashboard: Dashboard, finished_run: str) -> None:
    # The 13.6 MB post: the answer comes from its headers alone.
    for path in (track_path(new_uuid()), f"/api/v1/run/{finished_run}", "/api/v1/runs/archive"):
        with socket.create_connection(("127.0.0.1", dashboard.port), timeout=60) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{dashboard.port}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: 13600000\r\n\r\n".encode())
            status_line, answer = read_response(sock)
        assert status_line.startswith("HTTP/1.1 413"), status_line
        assert_refused(answer, f"13600000 bytes is larger than {MAX_BODY_BYTES} bytes")


def test_other_requests_are_answered_while_a_large_post_trickles_in(dashboard: Dashboard, finished_run: str) -> None:
    run_uuid = new_uuid()
    words = "x" * 99 + " "  # nothing JSON escapes, so the body's size is known
    body = json.dumps({"name": "large", "stdout": words * ((MAX_BODY_BYTES - 100) // len(words))}).encode()
    assert MAX_BODY_BYTES - 200 < len(body) <= MAX_BODY_BYTES
    with socket.create_connection(("127.0.0.1", dashboard.port), timeout=60) as sock:
        sock.sendall(f"POST {track_path(run_uuid)} HTTP/1.1\r\nHost: 127.0.0.1:{dashboard.port}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        for i, part in enumerate((body[:len(body) // 2], body[len(body) // 2:])):
            sock.sendall(part)
            if i == 0:
                # Half the body is in: other requests are answered meanwhile, the post is not.
                assert finished_run in run_uuids(dashboard)
                assert dashboard.request("GET", f"/api/v1/run/{finished_run}")[0] == 200
                assert select.select([sock], [], [], 0)[0] == [], "the post was answered before its body was sent"
        status_line, answer = read_response(sock)
    assert status_line.startswith("HTTP/1.1 200"), (status_line, answer)
    assert dashboard.request("GET", f"/api/v1/run/{run_uuid}")[1]["name"] == "large"


def test_a_run_cannot_store_past_its_cap(tmp_path: Path, no_leftover_processes: None) -> None:
    run_uuid = new_uuid()

    def series(start: int, count: int) -> dict[str, Any]:
        return {"track": {f"s{i:04d}": {"step": [1], "value": [0.5]} for i in range(start, start + count)}}

    # Worked out by hand: a new run 8 KiB, '{"name": "capped"}' 18 bytes, each new series 32 KiB and
    # three copies of its five-character name (32_783 bytes).
    per_series = SERIES_BYTES + 3 * 5
    stored = RUN_BYTES + 18 + 2000 * per_series  # 65_574_210
    remaining = MAX_RUN_BYTES - stored  # 1_534_654: room for 46 more series (1_508_018), not 47 (1_540_801)
    first = Dashboard(tmp_path)
    try:
        first.wait_ready()
        status, answer = send_json(first, "POST", track_path(run_uuid), {"name": "capped", **series(0, 2000)})
        assert status == 200, answer
        status, answer = send_json(first, "POST", track_path(run_uuid), series(2000, 47))
        assert status == 413, answer
        assert_refused(answer, f"run {run_uuid} has stored {stored} bytes and this request adds {47 * per_series}",
                       f"at most {MAX_RUN_BYTES} bytes")
        assert send_json(first, "POST", track_path(run_uuid), series(2000, 46))[0] == 200
        stored += 46 * per_series
        assert MAX_RUN_BYTES - stored == remaining - 46 * per_series == 26_636
        # Text is kept whole: '{"stdout": "..."}' is 14 bytes more than its text, and its log
        # pages 1/16 of it: 25_057 characters would add 14 + 25_057 + 1_567 = 26_638.
        status, answer = send_json(first, "POST", track_path(run_uuid), {"stdout": "y" * 25_057})
        assert status == 413, answer
        assert_refused(answer, f"has stored {stored} bytes and this request adds 26638")
        # Points on series it already has cost nothing: they replace older ones.
        assert send_json(first, "POST", track_path(run_uuid), series(0, 2046))[0] == 200
        names = series_names(first, run_uuid)
        assert len(names) == 2046 and "s2046" not in names
        assert "y" * 100 not in json.dumps(first.request("POST", f"/api/v1/logs/stdout/{run_uuid}", {"page": -2})[1])
        assert first.terminate() == 0
    finally:
        first.kill()

    second = Dashboard(tmp_path)  # the count survives a restart
    try:
        second.wait_ready()
        status, answer = send_json(second, "POST", track_path(run_uuid), series(3000, 1))
        assert status == 413 and f"has stored {stored} bytes" in answer["error"], answer
        assert send_json(second, "POST", track_path(run_uuid), {"stdout": "fits\n"})[0] == 200
        assert len(series_names(second, run_uuid)) == 2046
    finally:
        second.kill()
