"""Start the labml dashboard locally.

    python -m experiments.dashboard [--host 127.0.0.1] [--port 5005] [--data DIR] [--mongo URL]
                                    [--allowed-host NAME ...] [--runs-dir DATA_DIR]

By default the dashboard keeps its data in files under --data (no database server
needed); --mongo uses a MongoDB server instead.  Stop it with Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from configs.cli import OneLineParser, docstring_help
from dashboard.assets import default_cache_dir
from dashboard.guard import normalize_host_name


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


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = OneLineParser(name_in_errors=True, prog=prog, description=docstring_help(__doc__)[0])
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
    args = parser.parse_args(argv)

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

    from dashboard.server import serve

    return serve(host=args.host, port=port, data_dir=paths["--data"], mongo_url=args.mongo,
                 assets_dir=paths["--assets-cache"], allowed_hosts=tuple(args.allowed_host), runs_dir=runs_dir)


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
