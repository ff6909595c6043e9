"""Requests to a real dashboard as any client may send them, and what the tests read back."""

from __future__ import annotations

import http.client
import json
import uuid
from typing import Any

from dashboard_support import Dashboard

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
