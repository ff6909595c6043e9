"""Running the dashboard: lock the data folder, fetch assets, serve with uvicorn, stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn

from configs.refusals import error_line
from dashboard.assets import ensure_assets
from dashboard.connections import OncePerFilter, guarded_protocol, quiet_loop_errors
from dashboard.store import DataFolderLock
from dashboard.usage import MAX_RUNS, MAX_STORE_BYTES

# How long in-flight requests get to finish after Ctrl-C / SIGTERM.
GRACEFUL_SHUTDOWN_S = 3


def base_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # where a browser on this machine reaches a wildcard bind
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound before the app loads, so a busy port fails fast and clearly."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, stopping on SIGINT/SIGTERM without re-raising the signal afterwards.

    (uvicorn re-raises it so the process dies by that signal; a CLI that has shut down
    cleanly should just exit 0.)
    """

    def __init__(self, config: uvicorn.Config, url: str) -> None:
        super().__init__(config)
        self.url = url

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        def on_signal(sig: int, frame: FrameType | None) -> None:
            if self.should_exit:
                self.force_exit = True  # a second Ctrl-C skips the graceful wait
            self.should_exit = True

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        quiet_loop_errors(asyncio.get_running_loop())
        await super().startup(sockets=sockets)
        if not self.should_exit:
            print(f"Dashboard running at {self.url}  (Ctrl-C to stop)", flush=True)


@dataclass(frozen=True)
class Limits:
    """What one client may take of the server (see `connections`) and of the store (see `usage`)."""

    request_timeout_s: float = 30.0  # to send a whole request (headers and body), and to read a stalled answer
    idle_timeout_s: float = 5.0  # between requests on a kept-alive connection
    max_connections: int = 256
    max_runs: int = MAX_RUNS
    max_store_bytes: int = MAX_STORE_BYTES


def serve(*, host: str, port: int, data_dir: Path, mongo_url: str | None, assets_dir: Path,
          allowed_hosts: tuple[str, ...] = (), runs_dir: Path | None = None, limits: Limits = Limits()) -> int:
    """Run the dashboard until Ctrl-C or SIGTERM; returns the process exit code."""
    from dashboard.app import DashboardSettings, create_app
    from dashboard.store import DataFolderError

    data_dir.mkdir(parents=True, exist_ok=True)
    lock = DataFolderLock(data_dir)
    try:
        lock.acquire()
    except DataFolderError as e:
        print(error_line(f"--data {e}"), file=sys.stderr)
        return 1
    try:
        try:
            sock = bind(host, port)
        except OSError as e:
            print(error_line(f"--host {host} --port {port}: expected an address this machine can listen on ({e.strerror or e})"),
                  file=sys.stderr)
            return 1
        with sock:
            assets = ensure_assets(assets_dir)
            for error in assets.errors:
                print(f"dashboard: warning: could not fetch a front-end library ({error}); "
                      f"the page needs internet access for it", file=sys.stderr)
            url = base_url(host, port)
            settings = DashboardSettings(data_dir=data_dir, mongo_url=mongo_url, assets=assets,
                                         host=host, port=port, allowed_hosts=allowed_hosts, runs_dir=runs_dir,
                                         max_runs=limits.max_runs, max_store_bytes=limits.max_store_bytes)
            try:
                app = create_app(settings)
            except Exception as e:  # e.g. MongoDB unreachable
                print(error_line(f"cannot open the store: {e}"), file=sys.stderr)
                return 1
            store = mongo_url if mongo_url else f'{data_dir / "store"}'
            print(f"Store: {store}\n"
                  f"Point labml at it: labml_app_url={url}/api/v1/default\n"
                  f"Live hyperparameters of a run: {url}/hyperparams/RUN_UUID\n"
                  f"Run videos: {runs_dir if runs_dir is not None else 'none (start with --runs-dir DATA_DIR)'}",
                  flush=True)
            # labml-app's analyses average empty series on fresh runs; numpy warns each time.
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"numpy\.")
            config = uvicorn.Config(app, log_level="warning", lifespan="off",
                                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                                    http=guarded_protocol(limits.request_timeout_s, limits.max_connections),
                                    timeout_keep_alive=limits.idle_timeout_s)  # type: ignore[arg-type]
            logging.getLogger("uvicorn.error").addFilter(OncePerFilter())
            _Server(config, url).run(sockets=[sock])
    finally:
        lock.release()
    print("Dashboard stopped.", flush=True)
    return 0
