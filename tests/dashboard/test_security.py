"""Issue #11, reproduced against a real dashboard on 127.0.0.1 with real HTTP requests (its
lasting denial of service and large posts: test_denial_of_service.py).

1. DNS rebinding: a request whose Host names another site is refused.
2. Cross-site writes: what a page on another site can send (text/plain, no-cors, a foreign
   Origin) changes nothing; a run's declared live-hyperparameter ranges cannot be rewritten.
3. Framing: no answer may be shown in another site's frame (headers here; the browser's refusal
   in test_browser.py).
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import Dashboard
from http_support import (
    EVIL,
    PROBE_RANGES,
    assert_refused,
    live_ranges,
    new_uuid,
    run_uuids,
    send,
    send_json,
    track_path,
)

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


# 3. Framing


def answer_headers(dashboard: Dashboard, path: str, host: str | None = None) -> tuple[int, str, dict[str, list[str]]]:
    """(status, content type, every header by lower-case name) of a GET."""
    conn = http.client.HTTPConnection("127.0.0.1", dashboard.port, timeout=60)
    try:
        conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{dashboard.port}"})
        response = conn.getresponse()
        response.read()
        headers: dict[str, list[str]] = {}
        for name, value in response.getheaders():
            headers.setdefault(name.lower(), []).append(value)
        return response.status, response.getheader("content-type", ""), headers
    finally:
        conn.close()


def test_no_page_can_be_framed_by_another_site(dashboard: Dashboard, finished_run: str) -> None:
    """A page of another site could show a dashboard page in an invisible frame and take the owner's
    clicks (Apply, Archive) for its own: every answer forbids framing, each HTML page first."""
    pages = ["/", "/runs", "/compare", f"/compare?runs={finished_run}", f"/hyperparams/{finished_run}",
             f"/run/{finished_run}", f"/metrics/{finished_run}", "/index.html", "/no/such/page",
             "/_dashboard/page.html", "/_dashboard/compare.html", "/_dashboard/hyperparams.html"]
    others = [f"/api/v1/run/{finished_run}", "/api/v1/no-such-endpoint", "/js/bundle.min.js", "/_dashboard/compare.js"]
    for path in [*pages, *others]:
        status, content_type, headers = answer_headers(dashboard, path)
        assert status == (404 if "no-such" in path else 200), (path, status)
        assert (path in pages) == content_type.startswith("text/html"), (path, content_type)
        assert headers.get("x-frame-options") == ["DENY"], (path, headers)
        assert headers.get("content-security-policy") == ["frame-ancestors 'none'"], (path, headers)
    # A refusal made before anything else is reached carries them too.
    status, _, headers = answer_headers(dashboard, "/", host="rebind.evil.example")
    assert status == 421 and headers.get("x-frame-options") == ["DENY"], headers
