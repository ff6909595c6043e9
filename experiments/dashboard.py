"""Start the labml dashboard locally.

    python -m experiments.dashboard [--host 127.0.0.1] [--port 5005] [--data DIR] [--mongo URL]
                                    [--allowed-host NAME ...] [--runs-dir DATA_DIR] [limits]

By default the dashboard keeps its data in files under --data (no database server
needed); --mongo uses a MongoDB server instead.  Stop it with Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import math
import os
import resource
import socket
import sys
from pathlib import Path

from configs.cli import OneLineParser, docstring_help
from dashboard.assets import default_cache_dir


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "labml-dashboard"


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise ValueError
    return port


PROG = "python -m experiments.dashboard"
# Descriptors kept free of connections: the store's files, the listening socket, logs, imports.
RESERVED_FDS = 128


def max_connections_limit() -> int:
    """The most connections this process can hold: its hard open-file limit less `RESERVED_FDS`."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return max(16, min(65536 if hard == resource.RLIM_INFINITY else hard, 65536) - RESERVED_FDS)


def _bounded(parser: OneLineParser, option: str, value: str, low: int, high: int, kind: type = int) -> float:
    """`value` as a `kind` from `low` to `high`, or one error line naming `option`."""
    try:
        number = kind(value)
    except ValueError:
        number = math.nan
    if not low <= number <= high:  # NaN fails too
        noun = "an integer" if kind is int else "a number"
        parser.fail(f"{option} {value!r}: expected {noun} from {int(low)} to {int(high)}")
    return number


def _raise_open_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = OneLineParser(prog=prog, description=docstring_help(__doc__)[0])
    parser.add_argument("--host", default="127.0.0.1", metavar="ADDRESS", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", default="5005", metavar="PORT", help="port to listen on, 1-65535 (default: 5005)")
    parser.add_argument("--data", default=str(default_data_dir()), metavar="DIR",
                        help="folder for the store, the lock and pending hyperparameter changes "
                             "(default: $XDG_DATA_HOME/labml-dashboard, i.e. ~/.local/share/labml-dashboard)")
    parser.add_argument("--mongo", metavar="URL", default=None,
                        help="use this MongoDB (mongodb://host:port) for runs instead of files under --data")
    parser.add_argument("--assets-cache", metavar="DIR", default=str(default_cache_dir()),
                        help="where the front-end libraries fetched from the npm registry are cached "
                             "(default: ~/.cache/labml-dashboard/vendor)")
    parser.add_argument("--allowed-host", metavar="NAME", action="append", default=[],
                        help="also answer requests whose Host header names NAME (repeatable); by default only "
                             "127.0.0.1, localhost, [::1] and the --host address are answered, which keeps pages "
                             "on other sites out (DNS rebinding). There is no authentication: beyond loopback, "
                             "put an authenticating TLS proxy in front")
    parser.add_argument("--runs-dir", metavar="DATA_DIR", default=None,
                        help="the trainer's --data-dir (e.g. runs): a run's page then shows the newest MP4 in its "
                             "folder, DATA_DIR/NAME/RUN_UUID/ (default: no videos)")
    limits = parser.add_argument_group("limits", "what one client may take of the server and the store; "
                                                 "refused past them, one line at most once a minute in the log")
    fd_limit = max_connections_limit()
    limits.add_argument("--request-timeout", metavar="SECONDS", default="30",
                        help="time a client has to send a whole request, headers and body, from its first byte "
                             "(or from connecting), and to take an answer it has stopped reading; slower ones are "
                             "closed. 1 to 3600 (default: 30)")
    limits.add_argument("--idle-timeout", metavar="SECONDS", default="5",
                        help="how long a kept-alive connection may wait for its next request, 1 to 3600 (default: 5)")
    limits.add_argument("--max-connections", metavar="N", default=str(min(256, fd_limit)),
                        help=f"connections open at once; at the bound the one waiting longest for its request is "
                             f"closed to make room (a 503 when all are being answered). 16 to the open-file limit "
                             f"less {RESERVED_FDS}, here {fd_limit} (default: {min(256, fd_limit)})")
    limits.add_argument("--max-runs", metavar="N", default="1000",
                        help="runs the store may hold; a new run past it gets a 413. Deleting runs on the "
                             "dashboard makes room. 1 to 100000 (default: 1000)")
    limits.add_argument("--max-store-mb", metavar="MB", default="2048",
                        help="MiB the store may hold over all runs, counted as for the 64 MiB cap of each run; "
                             "past it updates get a 413. 1 to 1048576 (default: 2048)")
    args = parser.parse_args(argv)
    request_timeout = _bounded(parser, "--request-timeout", args.request_timeout, 1, 3600, float)
    idle_timeout = _bounded(parser, "--idle-timeout", args.idle_timeout, 1, 3600, float)
    max_connections = int(_bounded(parser, "--max-connections", args.max_connections, 16, fd_limit))
    max_runs = int(_bounded(parser, "--max-runs", args.max_runs, 1, 100000))
    max_store_mb = int(_bounded(parser, "--max-store-mb", args.max_store_mb, 1, 1048576))

    try:
        port = _port(args.port)
    except ValueError:
        parser.fail(f"--port {args.port!r}: expected an integer from 1 to 65535")
    if args.host == "localhost":
        args.host = "127.0.0.1"
    try:
        socket.getaddrinfo(args.host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        parser.fail(f"--host {args.host!r}: expected localhost or a numeric IP address such as 127.0.0.1")
    if args.allowed_host:  # the guard brings the web framework (2 s): not for --help nor another option
        from dashboard.guard import normalize_host_name
    for name in args.allowed_host:
        try:
            normalize_host_name(name)
        except ValueError:
            parser.fail(f"--allowed-host {name!r}: expected a host name or IP address without a port, "
                        f"such as dashboard.example.com")
    if args.mongo is not None and not args.mongo.startswith(("mongodb://", "mongodb+srv://")):
        parser.fail(f"--mongo {args.mongo!r}: expected a URL starting with mongodb:// or mongodb+srv://")
    paths = {}
    for option, value in (("--data", args.data), ("--assets-cache", args.assets_cache)):
        path = Path(value).expanduser()
        try:
            path.mkdir(parents=True, exist_ok=True)
            if not os.access(path, os.W_OK):
                raise PermissionError("not writable")
        except (OSError, ValueError) as e:
            parser.fail(f'{option} {value!r}: expected a writable folder ({getattr(e, "strerror", None) or e})')
        paths[option] = path.resolve()

    runs_dir = None if args.runs_dir is None else _runs_dir(parser, args.runs_dir)

    from dashboard.server import Limits, serve

    _raise_open_file_limit(max_connections + RESERVED_FDS)
    return serve(host=args.host, port=port, data_dir=paths["--data"], mongo_url=args.mongo,
                 assets_dir=paths["--assets-cache"], allowed_hosts=tuple(args.allowed_host), runs_dir=runs_dir,
                 limits=Limits(request_timeout_s=request_timeout, idle_timeout_s=idle_timeout,
                               max_connections=max_connections, max_runs=max_runs,
                               max_store_bytes=max_store_mb * 1024 * 1024))


def _runs_dir(parser: OneLineParser, value: str) -> Path:
    """--runs-dir, resolved. It may not exist yet (the first run creates it); if it does, it must be a
    folder this user can read."""
    path = Path(value).expanduser()
    if path.exists() and not (path.is_dir() and os.access(path, os.R_OK | os.X_OK)):
        parser.fail(f"--runs-dir {value!r}: expected a readable folder (the trainer's --data-dir)")
    if not path.exists():
        print(f"dashboard: note: --runs-dir {value} does not exist yet; a run's videos show once it writes them there",
              file=sys.stderr)
    return path.resolve()


if __name__ == "__main__":
    sys.exit(main())
