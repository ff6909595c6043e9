"""Issue #11, reproduced against a real dashboard on 127.0.0.1 with real HTTP requests (DNS
rebinding and cross-site writes: test_security.py).

3. Lasting denial of service: unstorable input is refused at ingestion, and no refused request
   breaks a later one, also after a restart.
4. Large posts: refused past the body cap before they are read; the server answers others while
   a large post trickles in; a run cannot store past its cap.
"""

from __future__ import annotations

import json
import select
import socket
from pathlib import Path
from typing import Any

from dashboard_support import Dashboard, finished_probe_run
from http_support import (
    MAX_BODY_BYTES,
    MAX_RUN_BYTES,
    RUN_BYTES,
    SERIES_BYTES,
    assert_refused,
    new_uuid,
    run_uuids,
    send,
    send_json,
    series_names,
    track_path,
)

# A dashboard of this module's own (tests/dashboard/conftest.py): attacks that, were one to break the
# server, must not fail other modules.
FRESH_DASHBOARD = True

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
