"""Issue 39, item 9: whatever a dashboard answers, a training run goes on, and never shows the
credentials in its --dashboard URL.

A real HTTP server on 127.0.0.1 (http.server in a thread) answers each of labml's /track posts with
the next piece of garbage (live values of the wrong type, unknown keys, invalid or deeply nested
JSON, a JSON list, labml "errors", a 500, a terminal escape as the run's URL, 2 MiB), then stops
answering at all; a real short training run sends to it as http://user:s3cret@127.0.0.1:PORT.  The
run completes with a checkpoint and exit 0, prints no traceback, and its output and files hold no
credentials (they went as HTTP basic authentication).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.test_experiment import TINY, summary_of

SECRET = "s3cret"
AUTHORIZATION = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
ANSWERS: list[tuple[int, bytes]] = [
    # The value_coef "x" (labml's tracker failed on it), other bad values, keys that are no live hyperparameter.
    (200, b'{"dynamic": {"value_coef": "x", "learning_rate": NaN, "epochs": 1e300, "clip_range": [1], '
          b'"gamma": 0.5, "no_such_key": 1}}'),
    (200, b'{"dynamic": "x"}'),
    (200, b"{not json"),
    (200, b"[1, 2, 3]"),
    # labml "errors" (labml marked its tracker failed), a terminal escape as the run's URL, and a good value.
    (200, b'{"errors": [{"error": "bad", "message": "\\u001b[31mred"}], "url": "\\u001b]0;pwned\\u0007", '
          b'"dynamic": {"value_coef": 0.75}}'),
    (200, b"[" * 100_000),
    (200, b'{"x": "' + b"y" * (2 * 1024 * 1024) + b'"}'),
    (500, b'{"error": "boom"}'),  # labml retries after 10 s: the retry meets the hang
]


@contextmanager
def hostile_dashboard() -> Iterator[tuple[int, list[str]]]:
    """(its port, the Authorization header of each request); the answers are `ANSWERS`, then none."""
    authorizations: list[str] = []
    lock, stop = threading.Lock(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                authorizations.append(self.headers.get("Authorization", ""))
                index = len(authorizations) - 1
            if index >= len(ANSWERS):
                stop.wait()  # a dashboard that hangs: never answers
                return
            status, body = ANSWERS[index]
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], authorizations
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_hostile_dashboard_cannot_stop_a_run(cli, tmp_path: Path) -> None:
    with hostile_dashboard() as (port, authorizations):
        result = cli.run("experiments.breakout", "--updates", "9", *TINY, "--data-dir", str(tmp_path),
                         "--dashboard", f"http://user:{SECRET}@127.0.0.1:{port}", "--dashboard-wait", "15")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    summary = summary_of(result.stdout)
    assert summary["updates"] == 9 and Path(summary["checkpoint"]).is_file()
    assert "Traceback" not in output, output[-4000:]
    # The last request hangs: the run's end gives labml's sender its --dashboard-wait and no more. The
    # last answer (a 500) makes labml sleep 10 s before it posts again, so the wait is 15 s: once the
    # 500 was answered, by the run's end, the post that meets the hang comes within it.
    assert "the dashboard did not take the run's last updates within 15 s (--dashboard-wait)" in output
    assert len(authorizations) > len(ANSWERS), f"only {len(authorizations)} requests: not every answer was tried"
    # The credentials went as HTTP basic authentication, and nowhere else.
    assert set(authorizations) == {AUTHORIZATION}
    assert SECRET not in output, output[-4000:]
    for path in Path(summary["run_dir"]).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    # The trainer refused the bad value and reported it; the dashboard's escape codes never reached the terminal.
    assert "refused live value value_coef = 'x': expected a number; keeping 0.5" in output
    assert "live value value_coef: 0.5 → 0.75, from the next update" in output  # good values still arrive
    assert "\x1b]0;pwned" not in output and "\x1b[31mred" not in output
    assert cli.leftovers() == []
