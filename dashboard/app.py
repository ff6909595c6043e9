"""The labml-app dashboard (its FastAPI app and front-end), adapted to run locally.

On top of the stock app this:
- keeps the data in a folder (or MongoDB) chosen by the caller (see `store`);
- claims new runs, so they show up under "Runs" instead of expiring;
- hands pending live-hyperparameter changes to runs with their `/track` responses;
- serves the CDN libraries from a local cache (see `assets`);
- shows runs as a training run needs (see `run_display`): named by game with a short uuid, the
  latest score and the real status in the list; the score as the run page's chart; the options
  the run set and its live values in the Configurations card; no Process/Computer buttons (the
  computer monitoring behind them is not served), nor labml's hosted-app menu entries, share
  button and settings (static/local-only.js); a chart's axis spanning every point it draws;
- replaces the static-file route, which served any file on the machine through an
  encoded `..` (``/..%2f..%2fetc%2fhostname``), with one confined to its folder;
- answers only for the host names it is served under, refuses cross-site writes and
  non-JSON bodies, and caps request bodies (see `guard`);
- refuses bad input at ingestion (malformed or unstorable JSON, wrong types, unknown runs,
  changed live-hyperparameter ranges) with a 4xx JSON error, so nothing stored can break a
  later request, and caps what one run and the whole store may hold (see `usage`);
- shows a run's latest evaluation video on its page, read from the trainer's runs folder
  (see `videos`);
- compares runs: their curves of one metric overlaid, chosen from the runs list (see `compare`),
  on agent steps, training time or the wall clock noted as their points arrive (see `run_clock`).

Where each part lives: `handlers` (the dashboard's own endpoints), `labml_app_patches`
(every change made to labml-app: its set-up, store, routes, middleware and CORS), `guard` (Host,
Origin, bodies), `strict_json` and `schema` (parsing and shapes), `checks` (labml packets, paths),
`stock_api` (the checks of labml-app's own endpoints), `usage` (the per-run cap), `videos` (run videos),
`files` (every file served: opened once, without following links), `compare` (runs side by
side), `web` (errors as JSON).
labml-app builds its app object when `labml_app.flask_app` is imported, so `create_app` can be
called once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from dashboard.assets import VendorAssets, vendor_folders
from dashboard.compare import compare_routes
from dashboard.guard import allowed_host_names
from dashboard.handlers import OWN_STATIC, DashboardHandlers
from dashboard.hyperparams import HyperParamStore
from dashboard.labml_app_patches import (
    answer_errors_as_json,
    build_index,
    chart_bundle_route,
    give_back_on_delete,
    guard_requests,
    load_labml_app,
    present_runs,
    replace_stock_routes,
    serialize_store_writes,
    trust_only_origin,
)
from dashboard.lane import StoreLane
from dashboard.run_clock import RunClock
from dashboard.usage import MAX_RUN_BYTES, MAX_RUNS, MAX_STORE_BYTES, RunUsage
from dashboard.videos import video_routes

# labml's packets weigh a few KB (the largest measured, a Breakout run's configs, 12.9 KB); labml
# merges at most 1024 points per series into one packet after an outage.  Parsing this much
# takes milliseconds, so no request can hold the others up for long.
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
TRACK_PATH = "/api/v1/{labml_token}/track"  # labml's client endpoint (see `handlers`)


@dataclass
class DashboardSettings:
    data_dir: Path
    mongo_url: str | None
    assets: VendorAssets
    host: str = "127.0.0.1"
    port: int = 5005
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_run_bytes: int = MAX_RUN_BYTES
    max_runs: int = MAX_RUNS
    max_store_bytes: int = MAX_STORE_BYTES
    allowed_hosts: tuple[str, ...] = ()  # answered besides the loopback names and `host`
    runs_dir: Path | None = None  # the trainer's data_dir, whose run videos the run pages show


def create_app(settings: DashboardSettings) -> FastAPI:
    flask_app = load_labml_app(settings.host, settings.port, settings.data_dir / "store", settings.mongo_url)
    static_root = Path(flask_app.STATIC_PATH)
    hp_store = HyperParamStore(settings.data_dir / "hyperparams.json")
    usage = RunUsage(settings.data_dir / "usage.json", settings.max_run_bytes, settings.max_runs,
                     settings.max_store_bytes)
    clock = RunClock(settings.data_dir / "run_clock")
    lane = StoreLane()
    handlers = DashboardHandlers(hp_store, usage, static_root, vendor_folders(settings.assets),
                                 build_index(static_root, settings.assets),
                                 own_page(settings.assets, "hyperparams", "Live hyperparameters"), lane, clock)
    present_runs(hp_store)
    give_back_on_delete(usage.forget, hp_store.forget, clock.forget)
    replace_stock_routes(flask_app, first=[*handlers.routes(), chart_bundle_route(static_root), *video_routes(settings.runs_dir),
                                           *compare_routes(hp_store, clock, own_page(settings.assets, "compare", "Compare runs"))],
                         last=handlers.catch_all_routes())
    serialize_store_writes(flask_app.app, lane, TRACK_PATH)
    answer_errors_as_json(flask_app)
    trust_only_origin(flask_app, f"http://{settings.host}:{settings.port}")
    guard_requests(flask_app.app, allowed_host_names(settings.host, settings.allowed_hosts), settings.max_body_bytes)
    return flask_app.app


def own_page(assets: VendorAssets, name: str, title: str) -> str:
    """One of the dashboard's own pages: `static/<name>.html` in the frame they share (`page.html`:
    labml-app's stylesheets, local copies of its libraries, the page's own style and script)."""
    frame = (OWN_STATIC / "page.html").read_text("utf-8").replace("{title}", title).replace("{name}", name)
    return assets.rewrite_index(frame.replace("{body}", (OWN_STATIC / f"{name}.html").read_text("utf-8")))
