"""Text from a dashboard never reaches the owner's terminal raw. Any local client can set a run's
status on the real dashboard (labml's status packet): it takes labml's statuses only, and
`experiments.tweak` quotes that status when it refuses a change; a hostile server can put anything
in every field `tweak` prints. Each is run through the real `tweak`, whose whole output is checked
for control characters."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from dashboard_support import Dashboard, run_tool

# A dashboard of this module's own (tests/dashboard/conftest.py): hostile statuses and names are stored,
# which must not reach other modules' pages.
FRESH_DASHBOARD = True

# Clears the screen, homes the cursor, retitles the window, then a carriage return and a line of
# its own that would look like ours.
HOSTILE = "completed\x1b[2J\x1b[H\x1b]0;owned\x07\rqueued: learning_rate=0.01\n\x9b31m\u202e"
DECLARED = {"type": "DynamicSchedule", "default": 2.5e-4, "range": [0.0, 1e-2], "dynamic_type": "float"}


def raw_controls(text: str) -> list[str]:
    """The control characters in `text` a terminal would act on (its own line ends aside)."""
    return sorted({repr(c) for c in text if (not c.isprintable() and c != "\n")})


def track(dashboard: Dashboard, run_uuid: str, packet: dict[str, Any]) -> None:
    status, answer = dashboard.request("POST", f"/api/v1/default/track?run_uuid={run_uuid}&labml_version=0.5.3", packet)
    assert status == 200, answer


# labml-app's statuses (`RunEnums` in labml_app/enums.py), in the order it declares them: the three
# labml's client sends at a run's end (labml/internal/experiment/watcher.py) and those it sets itself.
ACCEPTED = "one of 'completed', 'crashed', 'interrupted', 'in progress', 'unknown', 'no response'"


def test_only_labml_s_statuses_are_taken_and_tweak_prints_the_refusal_escaped(dashboard: Dashboard) -> None:
    """Any local client can send a run's status (labml's status packet). Any string was stored, and
    labml-app ranks a stored status in a table of its own: after one "foo", the run's status
    answered 500, and so did every page of the run."""
    run_uuid = uuid.uuid4().hex
    track(dashboard, run_uuid, {"name": "victim", "configs": {"learning_rate": {"name": "learning_rate", "computed": DECLARED}},
                                "time": 1.0})
    for sent in ("foo", HOSTILE, "", "Completed", "running"):
        status, answer = dashboard.request("POST", f"/api/v1/default/track?run_uuid={run_uuid}&labml_version=0.5.3",
                                           {"status": {"status": sent, "details": None, "time": 2.0}, "time": 2.0})
        assert status == 400, (sent, answer)
        assert set(answer) == {"error"} and "\n" not in answer["error"], answer
        assert answer["error"].startswith(f"field status.status: expected {ACCEPTED}, got {json.dumps(sent)[:37]}"), answer
    # Nothing was stored: what the run's pages read answers, and the run still takes changes.
    for path in (f"/api/v1/run/status/{run_uuid}", f"/api/v1/run/{run_uuid}", "/api/v1/runs/null"):
        assert dashboard.request("GET", path)[0] == 200, path
    assert dashboard.request("GET", f"/api/v1/run/status/{run_uuid}")[1]["run_status"]["status"] == "in progress"
    assert dashboard.request("GET", f"/api/v1/hyperparams/{run_uuid}")[1]["refusal"] is None

    # The statuses labml's client sends are taken, each as it is.
    for sent in ("crashed", "interrupted", "completed"):
        track(dashboard, run_uuid, {"status": {"rank": 0, "status": sent, "details": None, "time": 3.0}, "time": 3.0})
        assert dashboard.request("GET", f"/api/v1/run/status/{run_uuid}")[1]["run_status"]["status"] == sent

    # tweak quotes the status in its refusal; a hostile dashboard's (below) is printed escaped.
    refused = run_tool("experiments.tweak", run_uuid, "learning_rate=1e-4", "--dashboard", dashboard.url)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"run {run_uuid} is completed: a live change reaches only a running run" in refused.stderr


class HostileDashboard(BaseHTTPRequestHandler):
    """Answers `tweak`'s requests with escape sequences in every field it prints."""

    def do_GET(self) -> None:
        param = {"current": HOSTILE, "type": HOSTILE, "range": [HOSTILE, HOSTILE], "applied": None,
                 "sent": HOSTILE, "pending": HOSTILE}
        self.answer(200, {"run_uuid": "0" * 32, "name": HOSTILE, "params": {HOSTILE: param}, "refusal": HOSTILE})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.endswith("1" * 32):
            self.answer(200, {"pending": {HOSTILE: HOSTILE}})
        else:
            self.answer(409 if self.path.endswith("2" * 32) else 500, {"error": HOSTILE})

    def answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileDashboard)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(("run_uuid", "change", "code"), [
    ("0" * 32, None, 0),  # the listing: names, values, types, ranges, changes on their way, the refusal
    ("1" * 32, "learning_rate=1e-4", 0),  # what it says was queued
    ("2" * 32, "learning_rate=1e-4", 2),  # a refusal (4xx): the error line
    ("3" * 32, "learning_rate=1e-4", 1),  # a server error
])
def test_every_field_tweak_prints_from_a_hostile_dashboard_is_escaped(hostile: str, run_uuid: str, change: str | None,
                                                                      code: int) -> None:
    result = run_tool("experiments.tweak", run_uuid, *([change] if change else []), "--dashboard", hostile)
    said = result.stdout + result.stderr
    assert result.returncode == code, said
    assert raw_controls(said) == [], said
    assert "\\x1b[2J" in said, said
