"""The dashboard's own endpoints, one method each, and the routes that place them.

`DashboardHandlers.routes()` come before labml-app's stock routes, `catch_all_routes()` after
them (see `labml_app_patches.replace_stock_routes`).  labml-app's modules are imported inside
the handlers: they may only be imported once `labml_app_patches.load_labml_app` has set it up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from starlette.routing import Route

from dashboard.assets import VENDOR_ROUTE
from dashboard.checks import check_packets, check_run_uuid, escapes, json_body, known_run, track_query
from dashboard.files import OpenedFileResponse, open_in_folder
from dashboard.guard import large_body_turn
from dashboard.hyperparams import (
    HyperParamError,
    HyperParamStore,
    change_refusal,
    check_declarations,
    dynamic_specs,
    ended,
    is_run_itself,
    leg_started,
    param_state,
    reported_values,
    validate_changes,
)
from dashboard.labml_app_patches import stock_track
from dashboard.lane import StoreLane
from dashboard.run_clock import RunClock
from dashboard.run_display import initial_selected_configs, keep_machine_choices
from dashboard.usage import RunUsage
from dashboard.web import BadRequest, json_endpoint

OWN_STATIC = Path(__file__).parent / "static"
# labml-app sleeps 3 s after each /track to slow clients down (it was built for a shared
# server). labml's client sends its next packets as soon as it is answered, so this hold is what
# batches them: a quarter second caps a run at four requests a second, while a live change reaches
# the run, and a run's last records reach the dashboard, within about half a second.
TRACK_THROTTLE_S = 0.25
UUID1_EPOCH = 0x01B21DD213814000  # 1970-01-01 in a version-1 uuid's 100 ns ticks since 1582-10-15


class DashboardHandlers:
    """What the dashboard answers itself: labml's `/track`, live hyperparameters, and files.

    `usage` caps what each run stores, `static_root` is labml-app's front-end folder, `vendor`
    the local copies of its CDN libraries by package, `index_html` its page with those links
    rewritten, `hyperparams_html` the live-hyperparameter page with the same links, `lane` the
    store's one writer at a time (`lane.StoreLane`), `clock` when each run's points arrived.
    """

    def __init__(self, hp_store: HyperParamStore, usage: RunUsage, static_root: Path, vendor: dict[str, Path],
                 index_html: str, hyperparams_html: str, lane: StoreLane, clock: RunClock) -> None:
        self.lane = lane
        self.hp_store = hp_store
        self.usage = usage
        self.clock = clock
        self.static_root = static_root
        self.vendor = vendor
        self.index_html = index_html
        self.hyperparams_html = hyperparams_html

    def routes(self) -> list[Route]:
        """Routes that go before labml-app's own (the first replaces its `/track`)."""
        return [
            Route("/api/v1/{labml_token}/track", json_endpoint(self.track), methods=["POST"]),
            Route("/api/v1/hyperparams/{run_uuid}", json_endpoint(self.get_hyperparams), methods=["GET"]),
            Route("/api/v1/hyperparams/{run_uuid}", json_endpoint(self.set_hyperparams), methods=["POST"]),
            Route("/hyperparams/{run_uuid}", json_endpoint(self.hyperparams_page), methods=["GET"]),
            Route("/_dashboard/{file_path:path}", json_endpoint(self.own_static), methods=["GET"]),
            Route(VENDOR_ROUTE + "/{package}/{file_path:path}", json_endpoint(self.vendor_file), methods=["GET"]),
        ]

    def catch_all_routes(self) -> list[Route]:
        """Routes that go after every other: any unmatched path is a page of the front-end."""
        return [Route("/", json_endpoint(self.index), methods=["GET"]),
                Route("/{file_path:path}", json_endpoint(self.static_or_page), methods=["GET"])]

    async def track(self, request: Request, labml_token: str) -> dict[str, Any]:
        """labml's client endpoint: the stock handler plus checks, claiming and live hyperparameters."""
        from labml_app import settings as labml_settings
        from labml_app.db import project as project_db

        arrived = time.time()  # the wall clock of the points this request brings (run_clock.py)
        run_uuid, version, rank, world_size, main_rank = track_query(request)
        body = json_body(request)
        # labml-app files rank n > 0 of a distributed run as "<uuid>_<n>".
        stored_uuid = f"{run_uuid}_{rank}" if world_size > 1 and rank > 0 else run_uuid
        # Checking a body of thousands of series and reading the run's records take a while: off
        # the event loop, so a client that sends such bodies does not hold up the others.
        packets, first_configs, charged, new_series = await anyio.to_thread.run_sync(
            self._checked, body, run_uuid, stored_uuid, is_run_itself(run_uuid, stored_uuid, rank, main_rank),
            limiter=large_body_turn(request.scope, int(request.headers.get("content-length", "0"))))
        self.usage.check(stored_uuid, charged)
        if project_db.get_project(labml_token) is None:
            # The hosted app told unknown tokens to register; locally any token (such as the
            # documented 'default') files the run under the token-less "float" project, and
            # it is claimed below.  Otherwise labml's client stops at the first reply.
            labml_token = labml_settings.FLOAT_PROJECT_TOKEN
        if is_run_itself(run_uuid, stored_uuid, rank, main_rank) and leg_started(packets):
            # labml sends a status only at a run's end, so a run resumed in a new process would stay
            # "completed" (and refuse live changes) until its next end: its leg's start says it runs.
            await self.lane.in_thread(reopen_run, run_uuid)
        res = await stock_track(request, body, labml_token, version, run_uuid, rank, world_size, main_rank)
        # labml-app answers with its own record of live values; only the run itself gets ours.
        res["dynamic"] = {}
        if not res.get("errors"):
            # The stores' files are written and fsynced in a worker thread, never on the event loop.
            await anyio.to_thread.run_sync(self.usage.record, stored_uuid, charged, new_series)
            if is_run_itself(run_uuid, stored_uuid, rank, main_rank):
                await anyio.to_thread.run_sync(self.clock.note, run_uuid, packets, arrived)
                await self._after_update(request, run_uuid, packets, res, first_configs)
        await asyncio.sleep(TRACK_THROTTLE_S)
        return res

    def _checked(self, body: Any, run_uuid: str, stored_uuid: str,
                 run_itself: bool) -> tuple[list[dict[str, Any]], bool, int, list[str]]:
        """(packets, whether they bring the run's first configs, bytes to charge, new series)."""
        packets = check_packets(body)
        first_configs = self._check_declarations(stored_uuid, packets)
        if run_itself:
            drop_known_points(packets, last_steps(run_uuid))
        charged, new_series = self.usage.charge(stored_uuid, packets)
        return packets, first_configs, charged, new_series

    def _check_declarations(self, run_uuid: str, packets: list[dict[str, Any]]) -> bool:
        """Refuse changed live-hyperparameter declarations; True when these packets bring the
        run's first configs."""
        from labml_app.db import run as run_db

        r = run_db.get(run_uuid)
        stored = r.configs if r is not None else {}
        try:
            check_declarations(stored, packets)
        except HyperParamError as e:
            raise BadRequest(400, str(e)) from None
        keep_machine_choices(stored, packets)
        return not stored and any(packet.get("configs") for packet in packets)

    async def _after_update(self, request: Request, run_uuid: str, packets: list[dict[str, Any]],
                            res: dict[str, Any], first_configs: bool) -> None:
        from labml_app import handlers
        from labml_app.db import run as run_db

        r = run_db.get(run_uuid)
        if r is not None and not r.is_claimed:
            await handlers.claim_run(request, run_uuid=run_uuid)
        if r is not None and first_configs:
            # What the Configurations card lists until the user ticks others (labml-app keeps the
            # ticks in `selected_configs`; it would list none).
            r = run_db.get(run_uuid)
            r.selected_configs = initial_selected_configs(r.configs)
            r.save()
        started = uuid1_time(run_uuid)
        if r is not None and started is not None and started < r.start_time:
            # The runs list shows when the run began, not when this dashboard first heard of it
            # (a run that joins late, or resumes with a dashboard for the first time).
            r = run_db.get(run_uuid)
            r.start_time = started
            r.save()
        declared = dynamic_specs(r.configs) if r is not None else {}
        await anyio.to_thread.run_sync(self.hp_store.set_reported, run_uuid, reported_values(packets, declared), declared)
        if ended(packets):
            # Nothing will take them: a resume starts a new leg.
            await anyio.to_thread.run_sync(self.hp_store.drop_pending, run_uuid)
        elif r is not None and change_refusal(run_uuid, run_status(r)) is None:
            # Only a running leg's messages take them: the history a resume posts before its leg
            # starts comes from a plain request that would drop them, so a change queued for the
            # next leg waits for that leg's first message.
            # labml's client applies `dynamic` values to the run's registered dynamic hyperparameters.
            res["dynamic"] = await anyio.to_thread.run_sync(self.hp_store.take_pending, run_uuid)

    async def get_hyperparams(self, request: Request, run_uuid: str) -> dict[str, Any]:
        r = known_run(run_uuid)
        state = self.hp_store.get(run_uuid)
        params = {key: param_state(spec, state) for key, spec in sorted(dynamic_specs(r.configs).items())}
        status = run_status(r)
        return {"run_uuid": run_uuid, "name": r.name, "status": status, "params": params,
                "refusal": change_refusal(run_uuid, status)}

    async def set_hyperparams(self, request: Request, run_uuid: str) -> dict[str, Any]:
        # Requiring a JSON content type makes cross-site forms preflight (and fail CORS).
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise BadRequest(415, "expected Content-Type: application/json")
        r = known_run(run_uuid)
        try:
            accepted = validate_changes(dynamic_specs(r.configs), json_body(request))
        except HyperParamError as e:
            raise BadRequest(422, str(e)) from None
        # `?when=next-leg`: for a run that is not running, the change waits for its next leg (a
        # --resume) and is handed out with the answer to that leg's first message; population-based
        # training queues its explored values so, between two segments of a member.
        when = request.query_params.get("when", "")
        if when not in ("", "next-leg"):
            raise BadRequest(400, f"when {when[:40]!a}: expected next-leg, or nothing for a running run")
        refusal = None if when == "next-leg" else change_refusal(run_uuid, run_status(r))
        if refusal is not None:
            raise BadRequest(409, refusal)
        return {"run_uuid": run_uuid, "pending": await anyio.to_thread.run_sync(self.hp_store.add_pending, run_uuid, accepted)}

    async def hyperparams_page(self, request: Request, run_uuid: str) -> Response:
        check_run_uuid(run_uuid)
        return HTMLResponse(self.hyperparams_html)

    async def own_static(self, request: Request, file_path: str) -> Response:
        opened = open_in_folder(OWN_STATIC, file_path)
        if opened is None:
            raise BadRequest(404, f"not found: {file_path[:200]}")
        return OpenedFileResponse(opened, name=file_path)

    async def vendor_file(self, request: Request, package: str, file_path: str) -> Response:
        root = self.vendor.get(package)
        opened = None if root is None else open_in_folder(root, file_path)
        if opened is None:
            raise BadRequest(404, f"not found: {package}/{file_path[:200]}")
        return OpenedFileResponse(opened, name=file_path)

    async def index(self, request: Request) -> Response:
        return HTMLResponse(self.index_html)

    async def static_or_page(self, request: Request, file_path: str) -> Response:
        """labml-app's front-end files; any other path is a page of its single-page app."""
        if escapes(self.static_root, file_path):
            raise BadRequest(404, "not found: path leaves the static folder")
        if file_path == "api" or file_path.startswith("api/"):
            raise BadRequest(404, f"no such API endpoint: /{file_path[:200]}")
        opened = None if file_path.rsplit("/", 1)[-1] == "index.html" else open_in_folder(self.static_root, file_path)
        if opened is None:
            return HTMLResponse(self.index_html)
        return OpenedFileResponse(opened, name=file_path)


async def reopen_run(run_uuid: str) -> None:
    """Mark a known run that has ended as in progress again (a new leg of it has started); its
    next end sends its status as every end does."""
    from labml_app.db import run as run_db
    from labml_app.enums import RunEnums

    r = run_db.get(run_uuid)
    if r is None:
        return  # a new run: labml-app creates it in progress
    run_status = r.status.load().run_status.load()
    if run_status.status != RunEnums.RUN_IN_PROGRESS:
        run_status.status, run_status.details, run_status.time = RunEnums.RUN_IN_PROGRESS, None, time.time()
        run_status.save()


def run_status(r: Any) -> str:
    """labml-app's status of a run as its pages show it ('in progress', 'completed', 'no response'...)."""
    return str(r.status.load().get_true_status())


def last_steps(run_uuid: str) -> dict[str, float]:
    """The last step of each series labml-app keeps for the run."""
    from labml_app.analyses.experiments.metrics import MetricsAnalysis

    analysis = MetricsAnalysis.get(run_uuid)
    tracking = analysis.metrics.tracking if analysis is not None else {}
    return {name: float(series["last_step"][-1]) for name, series in tracking.items()
            if len(series.get("last_step", [])) > 0}


def drop_known_points(packets: list[dict[str, Any]], last: dict[str, float]) -> None:
    """Keep only the points after each series' stored last step. labml-app appends whatever it is
    sent, so a history a resumed run brings (experiments/run/labml/history.py) adds only what
    the dashboard lacks, and a series never goes back in steps."""
    for packet in packets:
        track = packet.get("track") or {}
        for name in list(track):
            if name not in last:
                continue
            series = track[name]
            kept = [i for i, step in enumerate(series["step"]) if step > last[name]]
            if not kept:
                del track[name]
            elif len(kept) < len(series["step"]):
                track[name] = {**series, "step": [series["step"][i] for i in kept],
                               "value": [series["value"][i] for i in kept]}


def uuid1_time(run_uuid: str) -> float | None:
    """When labml made the run's uuid (a version-1 uuid holds its creation time), as a Unix time;
    None for any other uuid."""
    try:
        parsed = uuid.UUID(hex=run_uuid)
    except ValueError:
        return None
    if parsed.version != 1:
        return None
    return (parsed.time - UUID1_EPOCH) / 1e7
