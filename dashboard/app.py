"""The labml-app dashboard (its FastAPI app and front-end), adapted to run locally.

On top of the stock app this:
- keeps the data in a folder (or MongoDB) chosen by the caller (see `store`);
- claims new runs, so they show up under "Runs" instead of expiring;
- hands pending live-hyperparameter changes to runs with their `/track` responses;
- serves the CDN libraries from a local cache (see `assets`);
- replaces the static-file route, which served any file on the machine through an
  encoded `..` (``/..%2f..%2fetc%2fhostname``), with one confined to its folder;
- answers bad input (malformed JSON, huge bodies, wrong types) with a 4xx JSON error.

labml-app builds its app object when `labml_app.flask_app` is imported, so
`create_app` can be called once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dashboard.assets import VENDOR_ROUTE, VendorAssets, vendor_folders
from dashboard.hyperparams import HyperParamError, HyperParamStore, dynamic_specs, reported_values, validate_changes

OWN_STATIC = Path(__file__).parent / "static"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# labml-app sleeps 3 s after each /track to slow clients down (it was built for a shared
# server); one second keeps live changes snappy and still batches a fast training loop.
TRACK_THROTTLE_S = 1.0
RUN_UUID_RE = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
# Top-level keys of a labml client packet, with the JSON types labml-app assumes.
PACKET_TYPES: dict[str, tuple] = {
    "configs": (dict,), "track": (dict,), "status": (dict,), "stdout": (str,), "stderr": (str,),
    "logger": (str,), "time": (int, float), "name": (str,), "comment": (str,), "tags": (list,),
    "indicators": (dict,), "wildcard_indicators": (dict,), "pid": (int,),
}


@dataclass
class DashboardSettings:
    data_dir: Path
    mongo_url: str | None
    assets: VendorAssets
    host: str = "127.0.0.1"
    port: int = 5005
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


class BadRequest(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class _BodyTooLarge(Exception):
    pass


def error_response(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


class BodySizeLimit:
    """Refuse request bodies over `max_bytes`, declared or streamed, with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                await error_response(400, "invalid Content-Length header")(scope, receive, send)
                return
            if too_large:
                await self._refuse(scope, receive, send)
                return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the endpoint; the app's handler turns it into a 413.
                    raise _BodyTooLarge()
            return message

        await self.app(scope, counting_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await error_response(413, f"request body is larger than {self.max_bytes} bytes")(scope, receive, send)


def _safe_file(root: Path, rel: str) -> Path | None:
    """`root/rel` if it is a file inside `root` (after resolving `..` and links), else None."""
    root = root.resolve()
    try:
        candidate = (root / rel).resolve()
    except (OSError, ValueError):  # e.g. NUL bytes, symlink loops
        return None
    if not candidate.is_relative_to(root) or not candidate.is_file():
        return None
    return candidate


def _escapes(root: Path, rel: str) -> bool:
    try:
        return not (root.resolve() / rel).resolve().is_relative_to(root.resolve())
    except (OSError, ValueError):
        return True


def _check_run_uuid(run_uuid: str) -> None:
    if not RUN_UUID_RE.match(run_uuid):
        raise BadRequest(400, f'invalid run UUID {run_uuid[:80]!r}: expected 1-64 letters, digits, "_" or "-"')


def _query_int(request: Request, name: str) -> int:
    raw = request.query_params.get(name, "0")
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(400, f"query parameter {name}={raw[:40]!r}: expected an integer") from None


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"malformed JSON body: {e}") from None


def _check_packets(body: Any) -> None:
    packets = body if isinstance(body, list) else [body]
    for packet in packets:
        if not isinstance(packet, dict):
            raise BadRequest(400, "expected a JSON object or a list of objects")
        for key, types in PACKET_TYPES.items():
            if key in packet and packet[key] is not None and not isinstance(packet[key], types):
                raise BadRequest(400, f"field {key!r} has the wrong type ({type(packet[key]).__name__})")
        configs = packet.get("configs") or {}
        for name, config in configs.items():
            if not isinstance(config, dict) or "name" not in config or "computed" not in config:
                raise BadRequest(400, f'configs[{name!r}]: expected an object with "name" and "computed"')


def _load_labml_app(settings: DashboardSettings) -> Any:
    """Import labml-app with our store in place of its MongoDB set-up; returns its module."""
    # labml_app.settings reads these at import; they only feed its CORS origin.
    os.environ.setdefault("LABML_APP_SERVER_IP", settings.host)
    os.environ.setdefault("LABML_APP_SERVER_PORT", str(settings.port))
    from labml_app import db

    from dashboard import store

    if settings.mongo_url is None:
        db.init_mongo_db = lambda *a, **kw: store.use_file_store(settings.data_dir / "store")
    else:
        mongo_url = settings.mongo_url
        db.init_mongo_db = lambda *a, **kw: store.use_mongo_store(mongo_url)
    from labml_app.logger import logger as labml_app_logger

    # It logs every request at INFO level.
    labml_app_logger.setLevel(logging.WARNING)
    with _no_git_lookup():
        from labml_app import flask_app
    return flask_app


@contextlib.contextmanager
def _no_git_lookup() -> Iterator[None]:
    """While labml-app is imported, make its start-up git lookup see "no repository".

    It reads the HEAD commit of whatever repository the working directory is in, only
    to log it on hosted deployments, and crashes in a repository without commits.
    """
    import git

    def no_repo(*args: Any, **kwargs: Any) -> None:
        raise git.InvalidGitRepositoryError("not looked up by the local dashboard")

    original = git.Repo
    git.Repo = no_repo  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        git.Repo = original  # type: ignore[misc]


def create_app(settings: DashboardSettings) -> FastAPI:
    flask_app = _load_labml_app(settings)
    from labml_app import handlers
    from labml_app import settings as labml_settings
    from labml_app.db import project as project_db
    from labml_app.db import run as run_db

    app: FastAPI = flask_app.app
    static_root: Path = Path(flask_app.STATIC_PATH)
    hp_store = HyperParamStore(settings.data_dir / "hyperparams.json")
    vendor = vendor_folders(settings.assets)
    index_html = _build_index(static_root, settings.assets)

    async def track(request: Request, labml_token: str) -> dict[str, Any]:
        """labml's client endpoint: the stock handler plus claiming and live hyperparameters."""
        run_uuid = request.query_params.get("run_uuid", "")
        rank = _query_int(request, "rank")
        world_size = _query_int(request, "world_size")
        main_rank = _query_int(request, "main_rank")
        packets = await _json_body(request)  # the stock handler re-reads the cached body
        _check_packets(packets)
        if project_db.get_project(labml_token) is None:
            # The hosted app told unknown tokens to register; locally any token (such as the
            # documented 'default') files the run under the token-less "float" project, and
            # it is claimed below.  Otherwise labml's client stops at the first reply.
            labml_token = labml_settings.FLOAT_PROJECT_TOKEN
        res: dict[str, Any] = await handlers._update_run(
            request, labml_token, request.query_params.get("labml_version", ""),
            run_uuid, rank, world_size, main_rank)
        if not res.get("errors") and rank == main_rank:
            r = run_db.get(run_uuid)
            if r is not None and not r.is_claimed:
                await handlers.claim_run(request, run_uuid=run_uuid)
            hp_store.set_reported(run_uuid, reported_values(packets))
            # labml's client applies `dynamic` values to the run's registered dynamic hyperparameters.
            res["dynamic"] = hp_store.take_pending(run_uuid)
        await asyncio.sleep(TRACK_THROTTLE_S)
        return res

    def _get_run(run_uuid: str) -> Any:
        _check_run_uuid(run_uuid)
        r = run_db.get(run_uuid)
        if r is None:
            raise BadRequest(404, f"unknown run {run_uuid}")
        return r

    async def get_hyperparams(request: Request, run_uuid: str) -> dict[str, Any]:
        r = _get_run(run_uuid)
        state = hp_store.get(run_uuid)
        params = {}
        for key, spec in sorted(dynamic_specs(r.configs).items()):
            params[key] = {**spec.to_json(),
                           # the last value the dashboard sent, else the run's default
                           "current": state["delivered"].get(key, spec.default),
                           "pending": state["pending"].get(key),
                           "reported": state["reported"].get(key)}
        return {"run_uuid": run_uuid, "name": r.name, "params": params}

    async def set_hyperparams(request: Request, run_uuid: str) -> dict[str, Any]:
        # Requiring a JSON content type makes cross-site forms preflight (and fail CORS).
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise BadRequest(415, "expected Content-Type: application/json")
        r = _get_run(run_uuid)
        try:
            accepted = validate_changes(dynamic_specs(r.configs), await _json_body(request))
        except HyperParamError as e:
            raise BadRequest(422, str(e)) from None
        return {"run_uuid": run_uuid, "pending": hp_store.add_pending(run_uuid, accepted)}

    async def hyperparams_page(request: Request, run_uuid: str) -> Response:
        _check_run_uuid(run_uuid)
        return FileResponse(OWN_STATIC / "hyperparams.html", media_type="text/html")

    async def own_static(request: Request, file_path: str) -> Response:
        path = _safe_file(OWN_STATIC, file_path)
        if path is None:
            raise BadRequest(404, f"not found: {file_path[:200]}")
        return FileResponse(path)

    async def vendor_file(request: Request, package: str, file_path: str) -> Response:
        root = vendor.get(package)
        path = None if root is None else _safe_file(root, file_path)
        if path is None:
            raise BadRequest(404, f"not found: {package}/{file_path[:200]}")
        return FileResponse(path)

    async def index(request: Request) -> Response:
        return HTMLResponse(index_html)

    async def static_or_page(request: Request, file_path: str) -> Response:
        """labml-app's front-end files; any other path is a page of its single-page app."""
        if _escapes(static_root, file_path):
            raise BadRequest(404, "not found: path leaves the static folder")
        if file_path == "api" or file_path.startswith("api/"):
            raise BadRequest(404, f"no such API endpoint: /{file_path[:200]}")
        path = _safe_file(static_root, file_path)
        if path is None or path.name == "index.html":
            return HTMLResponse(index_html)
        return FileResponse(path)

    stock_replaced = {flask_app.index, flask_app.send_js, handlers.update_run}
    stock_routes: list[BaseRoute] = [r for r in app.router.routes
                                     if getattr(r, "endpoint", None) not in stock_replaced]
    own_routes = [
        Route("/api/v1/{labml_token}/track", _json_endpoint(track), methods=["POST"]),
        Route("/api/v1/hyperparams/{run_uuid}", _json_endpoint(get_hyperparams), methods=["GET"]),
        Route("/api/v1/hyperparams/{run_uuid}", _json_endpoint(set_hyperparams), methods=["POST"]),
        Route("/hyperparams/{run_uuid}", _json_endpoint(hyperparams_page), methods=["GET"]),
        Route("/_dashboard/{file_path:path}", _json_endpoint(own_static), methods=["GET"]),
        Route(VENDOR_ROUTE + "/{package}/{file_path:path}", _json_endpoint(vendor_file), methods=["GET"]),
    ]
    catch_all = [Route("/", _json_endpoint(index), methods=["GET"]),
                 Route("/{file_path:path}", _json_endpoint(static_or_page), methods=["GET"])]
    # Order matters: the catch-all page route must come last.
    app.router.routes[:] = own_routes + stock_routes + catch_all

    # labml-app's own error middleware answers every failure with a 500 and a stack trace;
    # ours answers bad input with a 4xx and logs real failures on the server only.
    app.user_middleware[:] = [m for m in app.user_middleware
                              if m.kwargs.get("dispatch") is not flask_app.error_handling_middleware]
    # labml-app lets https://app.labml.ai make credentialed requests; a local dashboard that
    # can change a training run's hyperparameters should only trust its own pages.
    for middleware in app.user_middleware:
        if middleware.cls is CORSMiddleware:
            middleware.kwargs["allow_origins"] = [f"http://{settings.host}:{settings.port}"]
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_exception_handler(_BodyTooLarge, lambda request, exc: error_response(
        413, f"request body is larger than {settings.max_body_bytes} bytes"))
    app.add_exception_handler(json.JSONDecodeError, lambda request, exc: error_response(
        400, f"malformed JSON body: {exc}"))
    app.add_exception_handler(Exception, lambda request, exc: error_response(
        500, f"internal error: {type(exc).__name__}"))
    return app


def _json_endpoint(func: Callable[..., Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint calling `func(request, **path_params)`; dicts become JSON, `BadRequest` 4xx."""

    async def endpoint(request: Request) -> Response:
        try:
            result = await func(request, **request.path_params)
        except BadRequest as e:
            return error_response(e.status_code, e.message)
        return result if isinstance(result, Response) else JSONResponse(result)

    endpoint.__name__ = func.__name__
    return endpoint


def _build_index(static_root: Path, assets: VendorAssets) -> str:
    html = assets.rewrite_index((static_root / "index.html").read_text("utf-8"))
    errors = json.dumps(assets.errors).replace("</", "<\\/")
    extra = (f'<script>window.DASHBOARD_ASSET_ERRORS = {errors};</script>\n'
             '    <script src="/_dashboard/run-link.js" defer></script>\n')
    return html.replace("</head>", extra + "</head>", 1)
