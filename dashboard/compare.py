"""Runs side by side: the series of one metric for a few runs, for the comparison page.

`GET /api/v1/compare?runs=UUID,UUID[,…]&metric=NAME` answers
``{"metric": NAME, "metrics": [...], "score": SCORE, "runs": {UUID: {"name", "comment", "seed", "status",
"start_time", "live", "steps", "values", "seconds", "wall_seconds"}}}``:

- `steps`, `values`: the metric's, as the dashboard keeps them from what each run sent (labml-app
  keeps at most 1024 points a series; a longer run's older points are merged, as its run page
  shows them); empty for a run that did not record the metric;
- `metrics`: every metric the runs recorded, the score first; `score`: the score's name (the page
  explains its first point); without `metric`, the score when a run recorded it, else the first;
- `comment`: labml's comment, which names a sweep's trial or a population's member ("NAME trial 2");
- `seed`: the run's seed (None when it has none);
- `live`: each live hyperparameter the run now uses at another value than it started with,
  ``{"start": …, "now": …}``;
- `status`: labml's (`in progress`, `completed`, `interrupted`, `crashed`, `no response`, `unknown`);
- `start_time`: when it began (seconds since the epoch): labml-app's, the time in a labml run's
  uuid (the run's machine's clock), else its first request's;
- `seconds`: the run's training time at each step (`training_seconds`; empty when the run
  recorded no steps per second);
- `wall_seconds`: the wall-clock seconds since the run started at each step, as the dashboard
  noted its points arriving (`run_clock`; None where it has none).

The answer is bounded: at most `MAX_COMPARED_RUNS` runs of at most 1024 points each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from starlette.datastructures import QueryParams
from starlette.routing import Route

from dashboard.checks import RUN_UUID_RE
from dashboard.client import MAX_COMPARED_RUNS
from dashboard.hyperparams import HyperParamStore, as_declared, dynamic_specs
from dashboard.run_clock import RunClock
from dashboard.run_display import SCORE, seed_of
from dashboard.web import BadRequest, json_endpoint

MAX_METRIC_CHARS = 200
MAX_NAMES_SHOWN = 12  # names listed in an "unknown metric" line
QUERY_KEYS = ("runs", "metric")


def compare_query(params: QueryParams) -> tuple[list[str], str | None]:
    """(run uuids, metric or None) of a compare request's query parameters (a multi-dict)."""
    for key in params:
        if key not in QUERY_KEYS:
            raise BadRequest(400, f"query parameter {key[:40]!r}: unknown; expected runs=UUID,UUID[,…] and metric=NAME")
    for key in QUERY_KEYS:
        if len(params.getlist(key)) > 1:
            raise BadRequest(400, f"query parameter {key} is given {len(params.getlist(key))} times; expected it once")
    raw = params.get("runs")
    if raw is None or raw == "":
        raise BadRequest(400, "query parameter runs is missing; expected runs=UUID,UUID[,…] "
                              f"(1 to {MAX_COMPARED_RUNS} runs)")
    uuids = raw.split(",")
    if len(uuids) > MAX_COMPARED_RUNS:
        raise BadRequest(400, f"query parameter runs: {len(uuids)} runs; expected 1 to {MAX_COMPARED_RUNS}")
    for run_uuid in uuids:
        if not RUN_UUID_RE.match(run_uuid):
            raise BadRequest(400, f'query parameter runs: {run_uuid[:80]!r} is not a run UUID; expected 1-64 letters, '
                                  f'digits, "_" or "-", separated by commas')
        if uuids.count(run_uuid) > 1:
            raise BadRequest(400, f"query parameter runs: {run_uuid} is listed {uuids.count(run_uuid)} times; "
                                  f"expected each run once")
    metric = params.get("metric")
    if metric is not None and not 1 <= len(metric) <= MAX_METRIC_CHARS:
        raise BadRequest(400, f"query parameter metric={metric[:40]!r}: expected a metric name of 1 to "
                              f"{MAX_METRIC_CHARS} characters")
    return uuids, metric


def ordered_metrics(names: set[str]) -> list[str]:
    """Metric names as the page offers them: the score first, then by name."""
    return sorted(names, key=lambda name: (name != SCORE, name))


def chosen_metric(metric: str | None, recorded: list[str]) -> str | None:
    """The metric to answer: the one asked for (a 404 unless some run recorded it), else the first recorded."""
    if metric is None:
        return recorded[0] if recorded else None
    if metric not in recorded:
        shown = ", ".join(recorded[:MAX_NAMES_SHOWN]) + (", …" if len(recorded) > MAX_NAMES_SHOWN else "")
        raise BadRequest(404, f"unknown metric {metric[:80]!r}: none of these runs recorded it "
                              f"(they recorded: {shown or 'nothing yet'})")
    return metric


def changed_live_values(configs: Mapping[str, Any], state: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The live hyperparameters the run last reported using at another value than it started with,
    as {"start", "now"}: changed while it went (by hand, or at a population's exploit). A change
    not applied yet is not its value."""
    changed = {}
    for key, spec in sorted(dynamic_specs(configs).items()):
        now = as_declared(spec, state["reported"].get(key))
        if now is not None and now != spec.default:
            changed[key] = {"start": spec.default, "now": now}
    return changed


def training_seconds(steps: list[int | float], sps: Mapping[str, Any] | None) -> list[float]:
    """The run's training time at each of `steps`: each update's agent steps over its steps per
    second (the `sps` series), summed, and read between its points; start-up, checkpoints, videos
    and the time between legs are not in it. Empty without a usable `sps` series."""
    if sps is None or len(sps["step"]) == 0 or not all(float(v) > 0 for v in sps["value"]):
        return []
    at, elapsed, before = [0.0], [0.0], 0.0
    for step, rate in zip(sps["step"], sps["value"], strict=True):
        elapsed.append(elapsed[-1] + (float(step) - before) / float(rate))
        at.append(float(step))
        before = float(step)
    return [round(float(t), 3) for t in np.interp(steps, at, elapsed)]


def number(x: Any) -> int | float:
    """A stored step or value (numpy float64) as JSON: integral steps as integers."""
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def compare_runs(run_uuids: list[str], metric: str | None,
                 live_state: Callable[[str], Mapping[str, Mapping[str, Any]]], clock: RunClock) -> dict[str, Any]:
    """The answer of `GET /api/v1/compare` (see the module's docstring); `live_state(run_uuid)` is
    the dashboard's record of the run's live values (`HyperParamStore.get`), `clock` when its
    points arrived."""
    from labml_app.analyses.experiments.metrics import MetricsAnalysis
    from labml_app.db import run as run_db

    runs, tracking = {}, {}
    for run_uuid in run_uuids:
        r = run_db.get(run_uuid)
        if r is None:
            raise BadRequest(404, f"query parameter runs: unknown run {run_uuid}")
        runs[run_uuid] = r
        analysis = MetricsAnalysis.get(run_uuid)
        tracking[run_uuid] = analysis.metrics.tracking if analysis is not None else {}
    recorded = ordered_metrics({name for series in tracking.values() for name in series})
    metric = chosen_metric(metric, recorded)
    answer: dict[str, Any] = {}
    for run_uuid, r in runs.items():
        series = tracking[run_uuid].get(metric) if metric is not None else None
        steps = [] if series is None else [number(x) for x in series["step"]]
        values = [] if series is None else [float(x) for x in series["value"]]
        status = run_db.get_status(run_uuid)
        answer[run_uuid] = {"name": r.name, "comment": r.comment or "", "seed": seed_of(r.configs),
                            "status": status.get_data()["run_status"]["status"] if status is not None else "unknown",
                            "start_time": r.start_time,
                            "live": changed_live_values(r.configs, live_state(run_uuid)),
                            "steps": steps, "values": values, "seconds": training_seconds(steps, tracking[run_uuid].get("sps")),
                            "wall_seconds": clock.seconds(run_uuid, r.start_time, steps)}
    return {"metric": metric, "metrics": recorded, "score": SCORE, "runs": answer}


def compare_routes(hp_store: HyperParamStore, clock: RunClock, page_html: str) -> list[Route]:
    """The comparison API and its page (`/compare?runs=UUID,…&metrics=NAME,…`; the page reads its
    own query and asks the API, which checks it)."""

    async def compare(request: Request) -> dict[str, Any]:
        run_uuids, metric = compare_query(request.query_params)
        return compare_runs(run_uuids, metric, hp_store.get, clock)

    async def page(request: Request) -> Response:
        return HTMLResponse(page_html)

    return [Route("/api/v1/compare", json_endpoint(compare), methods=["GET"]),
            Route("/compare", json_endpoint(page), methods=["GET"])]
