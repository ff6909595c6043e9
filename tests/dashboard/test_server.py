"""The dashboard process: safe static files, bad input, one process per folder, restarts, signals."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from dashboard_support import REPO, Dashboard, child_env, finished_probe_run, free_port
from http_support import assert_refused, send

from tests.process_table import descendants

# A dashboard of this module's own (tests/dashboard/conftest.py): bad HTTP input that, were it to break the
# server, must not fail other modules.
FRESH_DASHBOARD = True

HOSTNAME = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else None


def raw_get(dashboard: Dashboard, path: str) -> tuple[int, bytes]:
    """GET with the path sent exactly as given (urllib would normalise it)."""
    conn = http.client.HTTPConnection("127.0.0.1", dashboard.port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", [
    "/..%2f..%2f..%2f..%2f..%2fetc%2fhostname",
    "/..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/../../../../../etc/passwd",
    "/js/..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/_dashboard/..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/_vendor/d3-6.7.0/..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/..%2fapp.py",
])
def test_static_files_never_leave_their_folder(dashboard: Dashboard, path: str) -> None:
    status, body = raw_get(dashboard, path)
    assert b"root:" not in body
    assert b"labml_app" not in body and b"import" not in body
    if HOSTNAME:
        assert HOSTNAME.encode() not in body or status != 200
    # Refused outright, or (for paths that normalise into the folder) the app's page.
    assert status == 404 or (status == 200 and body.lstrip().startswith(b"<!DOCTYPE html>")), (status, body[:200])


def test_without_runs_dir_there_are_no_videos(dashboard: Dashboard) -> None:
    # A dashboard started without --runs-dir (test_video.py reads videos with one).
    status, answer = send(dashboard, "GET", f"/api/v1/videos/{uuid.uuid1().hex}")
    assert status == 404
    assert_refused(answer, "start it with --runs-dir")


def test_front_end_is_served_with_local_libraries(dashboard: Dashboard) -> None:
    status, body = raw_get(dashboard, "/")
    page = body.decode()
    assert status == 200 and "/js/bundle.min.js" in page
    assert "d3js.org" not in page and "cdn.jsdelivr.net" not in page and "cdnjs.cloudflare.com" not in page
    for url in ("/_vendor/d3-6.7.0/dist/d3.min.js", "/_vendor/bootstrap-5.0.0-beta2/dist/css/bootstrap.min.css",
                "/_vendor/fontawesome-free-5.9.0/css/all.css",
                "/_vendor/fontawesome-free-5.9.0/webfonts/fa-solid-900.woff2",
                "/js/bundle.min.js", "/_dashboard/run-link.js", "/_dashboard/hyperparams.js"):
        status, body = raw_get(dashboard, url)
        assert status == 200 and len(body) > 100, url
    # Pages of the single-page app (such as a run) get index.html.
    status, body = raw_get(dashboard, "/run/0123456789abcdef")
    assert status == 200 and b"bundle.min.js" in body


def test_bad_http_input_gets_a_4xx_and_the_server_keeps_serving(dashboard: Dashboard, finished_run: str) -> None:
    track = "/api/v1/default/track?run_uuid=abcdefabcdefabcdef&labml_version=0.5.3"
    cases = [
        ("POST", track, b"{not json", 400),
        ("POST", track, b"\xff\xfe\x00", 400),
        ("POST", track, b"[1, 2]", 400),
        ("POST", track, json.dumps({"configs": "x"}).encode(), 400),
        ("POST", track, json.dumps({"configs": {"a": 1}}).encode(), 400),
        ("POST", track, json.dumps({"track": []}).encode(), 400),
        ("POST", track.replace("labml_version", "rank=x&labml_version"), b"{}", 400),
        ("GET", f'/api/v1/hyperparams/{"f" * 32}', None, 404),
        ("GET", "/api/v1/hyperparams/bad%20uuid", None, 400),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"learning_rate": ', 400),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b"[0.1]", 422),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b"{}", 422),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"learning_rate": "0.1"}', 422),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"learning_rate": true}', 422),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"learning_rate": 1e400}', 400),  # refused as it is parsed
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"learning_rate": -1}', 422),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"epochs": 17}', 422),
        ("POST", f"/api/v1/hyperparams/{finished_run}", b'{"gamma": 0.5}', 422),
        ("PUT", "/api/v1/runs", b"{oops", 400),  # a stock labml-app endpoint
        ("GET", "/api/v1/no/such/endpoint", None, 404),
    ]
    for method, path, body, expected in cases:
        status, answer = dashboard.request(method, path, raw=body)
        assert status == expected, (method, path, body, status, answer)
        assert isinstance(answer, dict) and answer.get("error"), (path, answer)

    # A JSON body sent as a form (as a cross-site page could) is refused.
    status, answer = dashboard.request("POST", f"/api/v1/hyperparams/{finished_run}",
                                       raw=b'{"learning_rate": 0.001}', headers={"Content-Type": "text/plain"})
    assert status == 415

    # Bodies over the cap are refused whether the size is declared or streamed.
    conn = http.client.HTTPConnection("127.0.0.1", dashboard.port, timeout=30)
    conn.putrequest("POST", track)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(10 ** 10))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and b"larger than" in response.read()
    conn.close()
    chunk = b"[" + b"0," * (1 << 20)
    conn = http.client.HTTPConnection("127.0.0.1", dashboard.port, timeout=30)
    try:
        conn.request("POST", track, body=iter([chunk] * 20), headers={"Content-Type": "application/json"},
                     encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 413
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close the connection before the client has sent everything
    finally:
        conn.close()

    # Nothing was queued by the refused requests, and the server still answers.
    status, info = dashboard.request("GET", f"/api/v1/hyperparams/{finished_run}")
    assert status == 200 and all(p["pending"] is None for p in info["params"].values())
    assert dashboard.proc.poll() is None


def test_second_dashboard_on_the_same_folder_is_refused(dashboard: Dashboard) -> None:
    second = subprocess.run([sys.executable, "-m", "experiments.dashboard", "--port", str(free_port()),
                             "--data", str(dashboard.data_dir)], cwd=REPO, env=child_env(),
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1
    assert "already used by another dashboard" in second.stderr
    assert f"pid {dashboard.proc.pid}" in second.stderr
    assert dashboard.request("GET", "/api/v1/runs/null")[0] == 200


LOCK_CONTENT = "not the dashboard's: a lock written through a link would replace this\n"


def plant_at_lock(data: Path, kind: str, victim: Path) -> None:
    """Put what an attacker could at `<data>/dashboard.lock`: a link or a second name of `victim`, or a FIFO."""
    data.mkdir()
    lock = data / "dashboard.lock"
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "hard link":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)


@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo"])
def test_the_lock_is_never_written_through_what_is_planted_in_its_place(tmp_path: Path, kind: str) -> None:
    from dashboard.store import DataFolderError, DataFolderLock

    victim = tmp_path / "victim"
    victim.write_text(LOCK_CONTENT)
    plant_at_lock(tmp_path / "data", kind, victim)
    what = "is a symbolic link" if kind == "symlink" else "is not a file of its own"
    with pytest.raises(DataFolderError, match=f"^{tmp_path / 'data'}: its dashboard.lock {what}"):
        DataFolderLock(tmp_path / "data").acquire()
    assert victim.read_text() == LOCK_CONTENT


def test_the_real_command_refuses_a_link_at_the_lock_in_one_line(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text(LOCK_CONTENT)
    data = tmp_path / "data"
    plant_at_lock(data, "symlink", victim)
    refused = subprocess.run([sys.executable, "-m", "experiments.dashboard", "--port", str(free_port()),
                              "--data", str(data)], cwd=REPO, env=child_env(), capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [f"error: --data {data}: its dashboard.lock is a symbolic link, which the "
                                           "lock would write through; remove it"]
    assert victim.read_text() == LOCK_CONTENT
    assert sorted(p.name for p in data.iterdir()) == ["dashboard.lock"]  # nothing else was started or written


def test_busy_port_is_reported(dashboard: Dashboard, tmp_path: Path) -> None:
    other = subprocess.run([sys.executable, "-m", "experiments.dashboard", "--port", str(dashboard.port),
                            "--data", str(tmp_path)], cwd=REPO, env=child_env(), capture_output=True, text=True,
                           timeout=60)
    assert other.returncode == 1 and f"--port {dashboard.port}" in other.stderr


@pytest.mark.parametrize("args, message", [
    (["--port", "http"], "--port 'http': expected an integer from 1 to 65535"),
    (["--port", "70000"], "--port '70000': expected an integer from 1 to 65535"),
    (["--host", "my host"], "--host 'my host': expected localhost or a numeric IP address"),
    (["--mongo", "localhost:27017"], "--mongo 'localhost:27017': expected a URL starting with mongodb://"),
    (["--data", "/dev/null/store"], "--data '/dev/null/store': expected a writable folder"),
    (["--allowed-host", "evil.example:80"], "--allowed-host 'evil.example:80': expected a host name or IP address without a port"),
    (["--allowed-host", "my host"], "--allowed-host 'my host': expected a host name"),
    (["--allowed-host", "*"], "--allowed-host '*': expected a host name"),
    (["--colour"], "unrecognized arguments: --colour"),
])
def test_bad_options_give_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "experiments.dashboard", *args], cwd=REPO, env=child_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_the_store_survives_a_restart(tmp_path: Path, no_leftover_processes: None) -> None:
    # A finished run takes no live change (409), before and after the restart alike; what was
    # queued for a running run is test_live_truth's.
    data = tmp_path / "data"
    first = Dashboard(data)
    try:
        first.wait_ready()
        run_uuid, _ = finished_probe_run(first.url, tmp_path / "probe", "5")
        status, _ = first.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"clip_range": 0.2})
        assert status == 409
        assert first.terminate() == 0
        assert "Dashboard stopped." in first.output
    finally:
        first.kill()

    second = Dashboard(data)
    try:
        second.wait_ready()
        status, run = second.request("GET", f"/api/v1/run/{run_uuid}")
        assert status == 200 and run["name"] == "probe"
        status, runs = second.request("GET", "/api/v1/runs/null")
        assert [r["run_uuid"] for r in runs["runs"]] == [run_uuid]
        status, info = second.request("GET", f"/api/v1/hyperparams/{run_uuid}")
        assert status == 200 and info["params"]["clip_range"].get("pending") is None
        assert second.request("POST", f"/api/v1/hyperparams/{run_uuid}", {"clip_range": 0.2})[0] == 409
        # Every store file is whole: no temporary files left from the atomic writes.
        assert not [p for p in data.rglob("*.tmp")]
    finally:
        second.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(tmp_path: Path, sig: signal.Signals, no_leftover_processes: None) -> None:
    d = Dashboard(tmp_path)
    try:
        d.wait_ready()
        assert d.request("GET", "/")[0] == 200
        assert descendants(d.proc.pid) == []  # it runs no helper processes
        d.proc.send_signal(sig)
        assert d.wait(30) == 0
        assert d.output.rstrip().endswith("Dashboard stopped."), d.output
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", d.port), timeout=5).close()
    finally:
        d.kill()
    # The folder is free again.
    again = Dashboard(tmp_path)
    try:
        again.wait_ready()
    finally:
        again.kill()
