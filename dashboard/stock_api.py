"""What each of labml-app's own endpoints accepts, checked before its handler runs.

labml-app's handlers index request bodies without checking them (a missing key or a list where
an object belongs is a 500) and store whatever types they are sent, some of which make every
later read of the run fail.  Each stock route gets:
- its run looked up first when its path names one: an unknown run is a 404 (some handlers
  would otherwise create records for any UUID they are asked about);
- its JSON body checked against the shape its handler reads (`BODIES`), with what the
  front-end sends (keys not listed are ignored by the handlers), and where the handler would
  fail on a mismatch with what is stored, against that (`STORED_FITS`).

labml's computer monitoring (``labml monitor``: sessions, CPU/GPU/... analyses) is not served:
training runs do not use it, and its ingestion reads free-form series names.  The checks are put
before the stock routes, and those routes dropped, by `labml_app_patches.replace_stock_routes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from dashboard import schema
from dashboard.checks import known_run
from dashboard.guard import parsed_json
from dashboard.web import BadRequest, error_response

RUN_UUIDS = schema.obj({"run_uuids": schema.list_of(schema.string)}, required=("run_uuids",))
STEP_RANGE = schema.list_of(schema.optional(schema.number), min_items=2, max_items=2, what="[start, end]")
PREFERENCES = {
    "series_preferences": schema.list_of(schema.integer), "series_names": schema.list_of(schema.string),
    "chart_type": schema.integer, "step_range": STEP_RANGE, "focus_smoothed": schema.boolean,
    "smooth_value": schema.number, "smooth_function": schema.string,
}
METRIC_PREFERENCES = schema.obj(PREFERENCES, required=("series_preferences",))
COMPARISON_PREFERENCES = schema.obj({
    **PREFERENCES, "base_experiment": schema.string, "base_series_preferences": schema.list_of(schema.integer),
    "base_series_names": schema.list_of(schema.string),
}, required=("series_preferences",))


def _names_needed(value: dict[str, Any], stored: dict[str, Any], prefix: str = "") -> None:
    """labml-app raises unless `<prefix>series_names` comes with `<prefix>series_preferences` of
    another length than the stored ones (the front-end echoes stored preferences without names)."""
    preferences, names = f"{prefix}series_preferences", f"{prefix}series_names"
    sent, kept = len(value[preferences]), len(stored.get(preferences) or [])
    if names not in value and sent != kept:
        raise BadRequest(400, f"field {names} is missing; it is needed when {preferences} has {sent} items "
                              f"and the stored preferences {kept}")


def metric_preferences_fit(value: dict[str, Any], run_uuid: str) -> None:
    from labml_app.analyses.experiments.distributed_metrics import DistMetricsPreferencesIndex
    from labml_app.analyses.experiments.metrics import MetricsPreferencesIndex
    from labml_app.db import run as run_db

    r = run_db.get(run_uuid)
    # A distributed run's preferences are kept apart, merged over its ranks.
    index = DistMetricsPreferencesIndex if r is not None and r.world_size > 0 else MetricsPreferencesIndex
    key = index.get(run_uuid)
    _names_needed(value, key.load().get_data() if key else {})


def comparison_preferences_fit(value: dict[str, Any], run_uuid: str) -> None:
    from labml_app.analyses.experiments.comparison import ComparisonPreferencesIndex

    key = ComparisonPreferencesIndex.get(run_uuid)
    stored = key.load().get_data() if key else {}
    _names_needed(value, stored)
    if value.get("base_experiment"):
        # labml-app reads the base run's series (creating records for any UUID) and its preferences.
        known_run(value["base_experiment"], "run in field base_experiment")
        schema.obj({}, required=("base_series_preferences",))(value, "")
        _names_needed(value, stored, "base_")


GET_ALL = schema.obj({"get_all": schema.boolean}, required=("get_all",))
LOG_PAGE = schema.obj({"page": schema.integer})
LOG_OPTIONS = schema.obj({"wrap_logs": schema.boolean})

# (method, path) → the body its handler reads.
BODIES: dict[tuple[str, str], schema.Check] = {
    ("POST", "/api/v1/runs/archive"): RUN_UUIDS,
    ("POST", "/api/v1/runs/unarchive"): RUN_UUIDS,
    ("PUT", "/api/v1/runs"): RUN_UUIDS,
    ("POST", "/api/v1/run/{run_uuid}"): schema.obj({
        "name": schema.string, "comment": schema.string, "note": schema.string,
        "favourite_configs": schema.list_of(schema.string), "selected_configs": schema.list_of(schema.string)}),
    ("POST", "/api/v1/user"): schema.obj({"user": schema.obj({"theme": schema.string})}, required=("user",)),
    ("POST", "/api/v1/auth/user"): schema.obj({}),
    ("POST", "/api/v1/metrics/{run_uuid}"): GET_ALL,
    ("POST", "/api/v1/metrics/preferences/{run_uuid}"): METRIC_PREFERENCES,
    ("POST", "/api/v1/compare/metrics/{run_uuid}"): GET_ALL,
    ("POST", "/api/v1/compare/preferences/{run_uuid}"): COMPARISON_PREFERENCES,
    ("POST", "/api/v1/custom_metrics/{run_uuid}"): schema.obj({
        "id": schema.string, "name": schema.string, "description": schema.string,
        "preferences": schema.obj(PREFERENCES)}, required=("id",)),
    ("POST", "/api/v1/custom_metrics/{run_uuid}/create"): schema.obj(
        {"name": schema.string, "description": schema.string}, required=("name",)),
    ("POST", "/api/v1/custom_metrics/{run_uuid}/delete"): schema.obj({"id": schema.string}, required=("id",)),
    **{("POST", f"/api/v1/logs/{kind}/{{run_uuid}}"): LOG_PAGE for kind in ("stdout", "stderr", "std_logger")},
    **{("POST", f"/api/v1/logs/{kind}/{{run_uuid}}/opt"): LOG_OPTIONS for kind in ("stdout", "stderr", "std_logger")},
}
# Checks of a body (already of the right shape) against what is stored for the route's run.
STORED_FITS: dict[tuple[str, str], Callable[[Any, str], None]] = {
    ("POST", "/api/v1/metrics/preferences/{run_uuid}"): metric_preferences_fit,
    ("POST", "/api/v1/compare/preferences/{run_uuid}"): comparison_preferences_fit,
}
# Query parameters that name a run (the comparison's current run).
RUN_QUERY: dict[tuple[str, str], str] = {("POST", "/api/v1/compare/metrics/{run_uuid}"): "current"}
# labml's computer monitoring, which this dashboard does not serve.
UNSERVED_MARKERS = ("{session_uuid}", "{computer_uuid}", "/computer", "/api/v1/session", "/api/v1/sessions")
UNSERVED_KEPT = {("GET", "/api/v1/sessions/{labml_token}")}  # the front-end's Computers tab lists none


def _checks(method: str, path: str) -> list[Callable[[Scope], None]]:
    checks: list[Callable[[Scope], None]] = []
    if "{run_uuid}" in path:
        checks.append(lambda scope: known_run(scope["path_params"]["run_uuid"]))
    query = RUN_QUERY.get((method, path))
    if query is not None:
        def check_query(scope: Scope) -> None:
            value = QueryParams(scope.get("query_string", b"")).get(query)
            if value is None:
                raise BadRequest(400, f"query parameter {query} is missing")
            known_run(value, f"run in query parameter {query}")
        checks.append(check_query)
    body = BODIES.get((method, path))
    if body is not None:
        checks.append(lambda scope: body(_body(scope), ""))
    fits = STORED_FITS.get((method, path))
    if fits is not None:
        checks.append(lambda scope: fits(_body(scope), scope["path_params"]["run_uuid"]))
    return checks


def _body(scope: Scope) -> Any:
    try:
        return parsed_json(scope)
    except KeyError:
        raise BadRequest(400, "expected a JSON body (Content-Type: application/json)") from None


def api_method(route: APIRoute) -> str | None:
    """The one method of a stock API route (labml-app registers one per route); None for others."""
    methods = route.methods or set()
    return next(iter(methods)) if route.path.startswith("/api/") and len(methods) == 1 else None


def is_unserved(method: str, path: str) -> bool:
    return (method, path) not in UNSERVED_KEPT and any(marker in path for marker in UNSERVED_MARKERS)


def checked(app: ASGIApp, method: str, path: str) -> ASGIApp:
    """`app` (the stock route's) behind the checks its method and path need (`app` itself if none)."""
    checks = _checks(method, path)
    if not checks:
        return app

    async def checked_app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            for check in checks:
                check(scope)
        except BadRequest as e:
            await error_response(e.status_code, e.message)(scope, receive, send)
            return
        await app(scope, receive, send)

    return checked_app
