"""Issue 39, item 5 (slowloris), against a real dashboard process with real sockets on 127.0.0.1.

Half-open connections (partial headers, a trickled byte, a body that never ends) are closed once
--request-timeout has passed since their first byte, however slowly they trickle; past
--max-connections the one waiting longest for its request is closed to make room, so a normal
request is still answered; the server says so in a line or two, never a traceback per connection.
Every wait ends at its event (a socket reading EOF, a response), with a generous upper bound.
"""

from __future__ import annotations

import selectors
import socket
import time
from pathlib import Path

from dashboard_support import Dashboard

HALF_OPEN = 300
MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 3
IDLE_TIMEOUT_S = 1  # the least it takes: the kept-alive connection below waits it out
EVENT_LIMIT_S = 300.0  # a bound on waits that end at their event, for a loaded machine


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` without answering it (EOF or a reset); a response fails."""
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    assert data == b"", f"a half-open connection got an answer: {data[:200]!r}"
    return True


def half_open(port: int, first_bytes: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(first_bytes)
    return sock


def wait_all_closed(socks: list[socket.socket], trickle: socket.socket | None = None) -> None:
    """Wait until the server has closed every one of `socks`; meanwhile send `trickle` one more byte
    of its headers every 0.2 s (the deadline is total, so trickling must not keep it open)."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    open_ = set(socks)
    deadline = time.monotonic() + EVENT_LIMIT_S
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if closed_by_server(sock):
                selector.unregister(sock)
                open_.discard(sock)
        if trickle is not None and trickle in open_:
            try:
                trickle.send(b"x")
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed under us: the next select sees it
    selector.close()
    assert not open_, f"{len(open_)} of {len(socks)} half-open connections were still open after {EVENT_LIMIT_S} s"


def test_half_open_connections_are_closed_and_others_answered(tmp_path: Path, no_leftover_processes: None) -> None:
    dashboard = Dashboard(tmp_path, options=("--request-timeout", str(REQUEST_TIMEOUT_S),
                                             "--idle-timeout", str(IDLE_TIMEOUT_S),
                                             "--max-connections", str(MAX_CONNECTIONS)))
    socks: list[socket.socket] = []
    try:
        dashboard.wait_ready()
        ready_lines = len(dashboard.lines)
        host = f"Host: 127.0.0.1:{dashboard.port}\r\n".encode()
        trickle = half_open(dashboard.port, b"GET /api/v1/runs/null HTTP/1.1\r\n" + host + b"X-Slow: ")
        socks.append(trickle)
        for i in range(HALF_OPEN):
            # Partial headers; nothing at all; a POST whose body never ends.
            first = [b"GET / HTTP/1.1\r\n" + host + b"X-Partial: ", b"",
                     b"POST /api/v1/runs/archive HTTP/1.1\r\n" + host
                     + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"run'][i % 3]
            socks.append(half_open(dashboard.port, first))
        # More half-open connections than the bound, and a normal request is still answered.
        status, runs = dashboard.request("GET", "/api/v1/runs/null")
        assert status == 200 and runs["runs"] == [], runs
        wait_all_closed(socks, trickle)

        # A kept-alive connection that goes quiet after its answer is closed too (--idle-timeout).
        with socket.create_connection(("127.0.0.1", dashboard.port), timeout=60) as sock:
            sock.sendall(b"GET /api/v1/runs/null HTTP/1.1\r\n" + host + b"\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            sock.settimeout(EVENT_LIMIT_S)
            while sock.recv(65536):
                pass  # the rest of the answer, then EOF

        assert dashboard.request("GET", "/api/v1/runs/null")[0] == 200
        assert dashboard.proc.poll() is None
        log = dashboard.lines[ready_lines:]
        # One line per kind of refusal (evicted, timed out), not one per connection.
        assert "Traceback" not in dashboard.output and len(log) <= 4, "\n".join(log)
        assert any("--max-connections" in line for line in log), log
        assert any(f"--request-timeout {REQUEST_TIMEOUT_S} s" in line for line in log), log
        assert dashboard.terminate() == 0
    finally:
        for sock in socks:
            sock.close()
        dashboard.kill()


def test_an_answer_left_unread_is_dropped(tmp_path: Path, no_leftover_processes: None) -> None:
    # Slow reading holds a descriptor as slow sending does: a client asks ten times for labml-app's
    # 800 KB source map (more than the kernel buffers on both sides) and reads none of it.
    dashboard = Dashboard(tmp_path, options=("--request-timeout", str(REQUEST_TIMEOUT_S)))
    try:
        dashboard.wait_ready()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
            sock.connect(("127.0.0.1", dashboard.port))
            request = b"GET /js/bundle.min.js.map HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % dashboard.port
            sock.sendall(request * 10)
            dashboard.wait_for_line(lambda line: "had not read its answer within --request-timeout" in line,
                                    EVENT_LIMIT_S)
            sock.settimeout(EVENT_LIMIT_S)
            received = b""
            try:
                while chunk := sock.recv(65536):
                    received += chunk
            except ConnectionResetError:
                pass  # dropped with its answer unsent: the kernel resets the connection
        assert received.startswith(b"HTTP/1.1 200"), received[:200]
        assert len(received) < 10 * 800_000  # cut off, not completed
        assert dashboard.request("GET", "/api/v1/runs/null")[0] == 200
        assert "Traceback" not in dashboard.output
        assert dashboard.terminate() == 0
    finally:
        dashboard.kill()
