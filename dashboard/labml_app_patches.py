"""Every change the dashboard makes to labml-app, its store and its stock app: the one place to
re-check when labml-app is upgraded (the training side's is experiments/run/labml/).

What is changed (each function says why):
- set-up, as it is imported (`load_labml_app`): the `LABML_APP_SERVER_IP` and
  `LABML_APP_SERVER_PORT` settings; `db.init_mongo_db` (files by labml_db's `set_db_drivers` in
  `use_file_store`, or the given MongoDB); the MongoDB driver's `_from_dump`
  (`read_mongo_records_as_data`); its logger's `setLevel` and `addFilter`; `git.Repo` meanwhile;
- labml_db's file drivers, subclassed to replace files whole (`AtomicFileDbDriver`: its `_path`
  over `_db_path` and `_serializer`; `AtomicFileIndexDbDriver`: its `_save_cache` of `_cache` to
  `_index_path`);
- labml-app's `/track` handler called by ours (`stock_track`): `handlers._update_run`, with the
  body our guard parsed put where `request.json()` returns it from (the request's `_json`);
- what a run shows (`present_runs`): `utils.get_default_series_preference`,
  `MetricsAnalysis.track`, `Run.get_data`, `Run.get_summary`; and `run.delete` (`give_back_on_delete`);
- its routes (`replace_stock_routes`): the router's `routes` (`index`, `send_js` and `update_run`
  replaced by ours, the computer monitoring dropped), each stock API route's `app` behind
  `stock_api`'s checks; `handlers._update_run`, `handlers.claim_run` and the write routes in the
  store's lane (`serialize_store_writes`);
- its front-end: the page (`build_index`) with local library links and our scripts and styles
  (static/run-link.js, run-video.js, local-only.js, compare-pick.js, app.css: each changes what
  the page draws, and reads the markup labml-app's bundle makes), the bundle's chart margin and
  window width (`chart_bundle_route`);
- its middleware: the stock error middleware out of `user_middleware`, our JSON errors in
  (`add_exception_handler`, `answer_errors_as_json`); CORS `allow_origins` (`trust_only_origin`);
  our request guard, and outermost the refusal of framing on every answer (`add_middleware`,
  `guard_requests`).
Elsewhere labml-app is only read through its public names, and its records written through its
models (`handlers`, `stock_api`, `compare`); `tests/test_labml_app_seam.py` fails on a change made
anywhere else, and on a private name of labml-app or labml_db read or written anywhere else.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from labml_db.driver.file import FileDbDriver
from labml_db.index_driver.file import FileIndexDbDriver
from labml_db.types import ModelDict
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from configs.files import atomic_write
from dashboard import run_display, safe_pickle, stock_api
from dashboard.assets import VendorAssets
from dashboard.guard import RequestGuard
from dashboard.hyperparams import HyperParamStore
from dashboard.lane import StoreLane
from dashboard.web import FramingRefused, error_response


def load_labml_app(host: str, port: int, file_store: Path, mongo_url: str | None) -> ModuleType:
    """Import labml-app with its models in files under `file_store` or, given `mongo_url`, in
    that MongoDB (labml-app's own set-up, pointed there); returns its `flask_app` module.

    labml-app builds its app object at import, so this can run once per process.
    """
    # labml_app.settings reads these at import; they only feed its CORS origin.
    os.environ.setdefault("LABML_APP_SERVER_IP", host)
    os.environ.setdefault("LABML_APP_SERVER_PORT", str(port))
    from labml_app import db

    # flask_app calls db.init_mongo_db() with no address (so localhost) as it is imported.
    stock_init_mongo_db = db.init_mongo_db
    if mongo_url is None:
        db.init_mongo_db = lambda *a, **kw: use_file_store(file_store)
    else:
        db.init_mongo_db = lambda *a, **kw: stock_init_mongo_db(mongo_url)
        read_mongo_records_as_data()
    from labml_app.logger import logger as labml_app_logger

    # It logs every request at INFO level.
    labml_app_logger.setLevel(logging.WARNING)
    labml_app_logger.addFilter(not_a_hosted_repo_message)
    import git

    def no_repo(*args: object, **kwargs: object) -> None:
        raise git.InvalidGitRepositoryError("not looked up by the local dashboard")

    # Its start-up reads the HEAD commit of whatever repository the working directory is in, only
    # to log it on hosted deployments, and crashes in a repository without commits.
    stock_repo, git.Repo = git.Repo, no_repo  # type: ignore[assignment,misc]
    try:
        from labml_app import flask_app
    finally:
        git.Repo = stock_repo  # type: ignore[misc]
    return flask_app


def use_file_store(data_dir: Path) -> None:
    """Point every labml-app model and index at files under `data_dir` (`store`), with the two
    projects labml-app's `init_mongo_db` creates: runs without a token land in the "float" one.

    Models are pickled (as labml-app does for MongoDB: some hold values JSON cannot
    represent) and read back as plain data only (`safe_pickle`); indexes are small JSON maps.
    """
    from labml_app import db, settings
    from labml_app.db import project
    from labml_db import Index, Model
    from labml_db.serializer.json import JsonSerializer

    models_dir, indexes_dir = data_dir / "models", data_dir / "indexes"
    models_dir.mkdir(parents=True, exist_ok=True)
    indexes_dir.mkdir(parents=True, exist_ok=True)
    Model.set_db_drivers([AtomicFileDbDriver(safe_pickle.SafePickleSerializer(), m, models_dir) for m in db.models])
    Index.set_db_drivers([AtomicFileIndexDbDriver(JsonSerializer(), i, indexes_dir / f"{i.__name__}.json")
                          for i in db.indexes])
    project.create_project(settings.FLOAT_PROJECT_TOKEN, "float project")
    project.create_project(settings.SAMPLES_PROJECT_TOKEN, "samples project")


class AtomicFileDbDriver(FileDbDriver):
    """labml_db's `FileDbDriver` rewrites a file in place (a crash leaves it cut short): this one
    replaces it whole; one pickle per model instance, read as data only (`safe_pickle`)."""

    def _path(self, key: str) -> Path:
        return self._db_path / f"{key}.{self._serializer.file_extension}"

    def load_dict(self, key: str) -> ModelDict | None:
        # Files are only ever replaced whole, so no read lock is needed.
        try:
            data = self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        record: ModelDict | None = safe_pickle.read_record(data, str(self._path(key)))
        return record

    def save_dict(self, key: str, data: ModelDict) -> None:
        atomic_write(self._path(key), self._serializer.to_string(data))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


class AtomicFileIndexDbDriver(FileIndexDbDriver):
    """labml_db's `FileIndexDbDriver`, its index file replaced whole on every change. It caches the
    whole index in memory: one process per data folder (`store.DataFolderLock`)."""

    def _save_cache(self) -> None:
        atomic_write(self._index_path, self._serializer.to_string(self._cache).encode("utf-8"))


async def stock_track(request: Request, body: object, labml_token: str, version: str, run_uuid: str, rank: int,
                      world_size: int, main_rank: int) -> dict[str, Any]:
    """labml-app's `/track` handler (in the store's lane: `serialize_store_writes`) on `body`, the
    body our guard parsed: the stock handler reads it with `request.json()`, which returns `_json`."""
    from labml_app import handlers

    request._json = body
    answer: dict[str, Any] = await handlers._update_run(request, labml_token, version, run_uuid, rank, world_size, main_rank)
    return answer


def read_mongo_records_as_data() -> None:
    """labml-app's MongoDB driver unpickles each record as it stands: read it through
    `safe_pickle.read_record` instead, as the file store does."""
    from labml_app import db

    def from_dump(data: Any) -> Any:
        return None if data is None else safe_pickle.read_record(data["data"], "in MongoDB")

    db.MongoPickleDbDriver._from_dump = staticmethod(from_dump)


def not_a_hosted_repo_message(record: logging.LogRecord) -> bool:
    """False for labml-app's "unknown repo url" errors, logged on every view of a run whose git
    remote is not a hosted one (a local path, a server without "git" in its name): it only means
    the run page shows no link to the commit."""
    return not str(record.msg).startswith("unknown repo url")


def replace_stock_routes(flask_app: ModuleType, first: Sequence[BaseRoute], last: Sequence[BaseRoute]) -> None:
    """Put `first` before labml-app's routes and `last` after them. Of its routes, those ours
    replace are dropped (the index page, the static-file route, which served any file on the
    machine through an encoded ``..``, and `/track`), and so is labml's computer monitoring, which
    training runs do not use and whose ingestion reads free-form series names; each other API route
    is put behind the checks `stock_api` holds for it (its handlers index bodies without checking)."""
    from labml_app import handlers

    app = flask_app.app
    replaced = {flask_app.index, flask_app.send_js, handlers.update_run}
    stock: list[BaseRoute] = []
    for route in app.router.routes:
        if getattr(route, "endpoint", None) in replaced:
            continue
        if isinstance(route, APIRoute) and (method := stock_api.api_method(route)) is not None:
            if stock_api.is_unserved(method, route.path):
                continue
            route.app = stock_api.checked(route.app, method, route.path)
        stock.append(route)
    # Order matters: a catch-all page route must come last.
    app.router.routes[:] = [*first, *stock, *last]


def answer_errors_as_json(flask_app: ModuleType) -> None:
    """labml-app's own error middleware answers every failure with a 500 and a stack trace; ours
    answers bad input with a 4xx (`web.BadRequest` is answered by our endpoints themselves) and any
    other failure with a bare 500, its details in the server's log only."""
    app = flask_app.app
    app.user_middleware[:] = [m for m in app.user_middleware
                              if m.kwargs.get("dispatch") is not flask_app.error_handling_middleware]
    app.add_exception_handler(json.JSONDecodeError, lambda request, exc: error_response(
        400, f"malformed JSON body: {exc}"))
    app.add_exception_handler(Exception, lambda request, exc: error_response(
        500, f"internal error: {type(exc).__name__}"))


def trust_only_origin(flask_app: ModuleType, origin: str) -> None:
    """labml-app lets https://app.labml.ai make credentialed requests; a local dashboard that
    can change a training run's hyperparameters should only trust its own pages."""
    for middleware in flask_app.app.user_middleware:
        if middleware.cls is CORSMiddleware:
            middleware.kwargs["allow_origins"] = [origin]


def guard_requests(app: FastAPI, allowed_hosts: frozenset[str], max_body_bytes: int) -> None:
    """`guard.RequestGuard` around everything, so a refused request reaches nothing else, and
    around it `web.FramingRefused`, so every answer (a refusal too) forbids framing: call it last,
    as Starlette runs the middleware added last first."""
    app.add_middleware(RequestGuard, allowed_hosts=allowed_hosts, max_body_bytes=max_body_bytes)
    app.add_middleware(FramingRefused)


def present_runs(hp_store: HyperParamStore) -> None:
    """Make labml-app show runs as `run_display` describes: the score as the Metrics chart, a
    run's live values in its configs, a short uuid, seed, step and score in the runs list."""
    from labml_app import utils
    from labml_app.analyses.experiments import metrics
    from labml_app.db import run as run_db

    stock_preference = utils.get_default_series_preference
    utils.get_default_series_preference = lambda names: run_display.default_series_preference(names, stock_preference)
    stock_track = metrics.MetricsAnalysis.track

    def track(self: Any, data: dict[str, Any], run_uuid: str | None = None) -> None:
        before = sorted(self.metrics.indicators)
        stock_track(self, data, run_uuid)
        after = sorted(self.metrics.indicators)
        if after == before or run_uuid is None:
            return
        mp = metrics.MetricsPreferencesIndex.get(run_uuid).load()
        chosen = run_display.preference_when_score_appears(before, after, mp.get_data()["series_preferences"],
                                                           stock_preference)
        if chosen is not None:
            mp.update_preferences({"series_preferences": chosen})

    metrics.MetricsAnalysis.track = track

    stock_get_data = run_db.Run.get_data
    run_db.Run.get_data = lambda self, *a, **kw: run_display.with_live_values(
        stock_get_data(self, *a, **kw), hp_store.get(self.run_uuid))
    stock_summary = run_db.Run.get_summary

    def get_summary(self: Any) -> dict[str, Any]:
        analysis = metrics.MetricsAnalysis.get(self.run_uuid)
        series = {} if analysis is None else {s["name"]: s for s in analysis.get_tracking()}
        return run_display.list_summary(stock_summary(self), series, run_display.seed_of(self.configs))

    run_db.Run.get_summary = get_summary


def give_back_on_delete(*forgets: Callable[..., None]) -> None:
    """A run deleted on the dashboard is forgotten by each of our stores (`forgets`: the usage's,
    so that it no longer counts against the caps, the live values', the clock's)."""
    from labml_app.db import run as run_db

    stock_delete = run_db.delete

    def delete(run_uuid: str) -> None:
        stock_delete(run_uuid)
        for forget in forgets:  # on the event loop: each writes its file in a thread of its own
            forget(run_uuid, write_soon=True)

    run_db.delete = delete


def serialize_store_writes(app: FastAPI, lane: StoreLane, track_path: str) -> None:
    """Put labml-app's writes in `lane`'s turns: labml's updates (`track_path`, which the
    dashboard's handler passes to labml-app's `_update_run` and `claim_run`) in its worker thread,
    the front-end's writes (the stock API's POST, PUT and DELETE routes) on the event loop."""
    from labml_app import handlers

    def in_lane(stock: Any) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await lane.in_thread(stock, *args, **kwargs)
        return call

    handlers._update_run, handlers.claim_run = in_lane(handlers._update_run), in_lane(handlers.claim_run)
    tracks = [r for r in app.router.routes if isinstance(r, Route) and r.path == track_path]
    if len(tracks) != 1:
        raise RuntimeError(f"expected one route {track_path}, found {len(tracks)}")
    tracks[0].app = lane.admitting(tracks[0].app)
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.path.startswith("/api/") and (route.methods or set()) & {"POST", "PUT", "DELETE"}:
            route.app = lane.one_writer(route.app)


def build_index(static_root: Path, assets: VendorAssets) -> str:
    """labml-app's page (served by our `index` route) with local library links, the asset errors,
    and our scripts and style rules, which change what it draws (see each file's top)."""
    html = assets.rewrite_index((static_root / "index.html").read_text("utf-8"))
    errors = json.dumps(assets.errors).replace("</", "<\\/")
    extra = (f"<script>window.DASHBOARD_ASSET_ERRORS = {errors};</script>\n"
             '    <script src="/_dashboard/run-link.js" defer></script>\n'
             '    <script src="/_dashboard/run-video.js" defer></script>\n'
             '    <script src="/_dashboard/local-only.js" defer></script>\n'
             '    <script src="/_dashboard/compare-pick.js" defer></script>\n'
             '    <link href="/_dashboard/app.css" rel="stylesheet">\n')
    return html.replace("</head>", extra + "</head>", 1)


# labml-app's charts leave the lowest and highest 4% of a series out of the y axis when they lie
# over two standard deviations from the rest (`OUTLIER_MARGIN` in its charts' constants), yet
# still draw them: a run's first scores, far below the ones it reaches within a few updates, were
# drawn under the x axis. With the margin 0 the axis spans every point it draws.
OUTLIER_MARGIN = ("s.OUTLIER_MARGIN=.04,", "s.OUTLIER_MARGIN=0,")
# labml-app sizes its pages and charts to the window's innerWidth, which counts a classic scrollbar
# in, so they would scroll sideways by its width. They get the root element's: the room beside the
# gutter app.css keeps for the scrollbar from the start (Chromium's root clientWidth leaves it out).
WINDOW_WIDTH = ("var{innerWidth:e,innerHeight:t}=window;return{width:e,height:t}",
                "var e=document.documentElement.getBoundingClientRect().width,{innerHeight:t}=window;"
                "return{width:e,height:t}")


def chart_bundle_route(static_root: Path) -> Route:
    """labml-app's front-end bundle (`/js/bundle.min.js`) with the chart's axis spanning every
    point and pages as wide as the room beside the scrollbar; refuses to start on a bundle where
    it does not find what it changes (a labml-app upgrade)."""
    from starlette.responses import Response

    bundle = (static_root / "js" / "bundle.min.js").read_text("utf-8")
    for stock, ours in (OUTLIER_MARGIN, WINDOW_WIDTH):
        if bundle.count(stock) != 1:
            raise RuntimeError(f"labml-app's bundle.min.js has {bundle.count(stock)} copies of {stock!r}, expected 1")
        bundle = bundle.replace(stock, ours)
    body = bundle.encode("utf-8")

    async def serve(request: Request) -> Response:
        return Response(body, media_type="text/javascript")

    return Route("/js/bundle.min.js", serve, methods=["GET"])
