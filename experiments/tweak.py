"""Change a running experiment's live hyperparameters through the dashboard.

    python -m experiments.tweak RUN_UUID learning_rate=1e-4 epochs=3 [--dashboard URL]
    python -m experiments.tweak RUN_UUID            # list them

The run receives the new values with its next update to the dashboard; a run that is not
running (completed, interrupted, crashed) takes none: the change is refused. Every refusal (that
one, a bad value, an unknown run, no dashboard answering at --dashboard) is one line and exit
code 2; a dashboard that fails (HTTP 5xx) gives exit code 1.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from configs.cli import OneLineParser, docstring_help
from configs.fields import ConfigError
from configs.machine import url_problem
from configs.refusals import fail
from configs.terminal import escaped
from configs.urls import DEFAULT_DASHBOARD as DEFAULT_DASHBOARD_URL
from configs.urls import strip_userinfo
from dashboard.client import DashboardError, get_hyperparams, set_hyperparams
from experiments.run.folders import RunFolder
from experiments.run.safe_files import UnsafeRunFolder, open_to_read

Number = int | float


def parse_assignment(text: str) -> tuple[str, Number]:
    """'learning_rate=1e-4' -> ('learning_rate', 0.0001); integers stay integers."""
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise ValueError(f"{text!r}: expected NAME=VALUE, e.g. learning_rate=1e-4")
    try:
        return key, int(raw)
    except ValueError:
        pass
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{text!r}: {raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text!r}: expected a finite number")
    return key, value


def listing_line(key: str, p: dict[str, Any]) -> str:
    """`epochs = 4  int in [1, 16]  (sent, not applied yet: 6)`: the value the run reports using
    (or its starting value, said so, before its first report) and any change on its way."""
    notes = "" if p.get("applied") is not None else "  (its starting value: the run has not reported it yet)"
    if p.get("sent") is not None:
        notes += f'  (sent, not applied yet: {p["sent"]})'
    if p.get("pending") is not None:
        notes += f'  (pending: {p["pending"]})'
    return f'{key} = {p["current"]}  {p["type"]} in [{p["range"][0]}, {p["range"][1]}]{notes}'


def recorded_dashboard(run_dir: Path) -> str | None:
    """The dashboard a run folder's `configs.yaml` says the run reported to (labml writes it for each
    leg), or None: none recorded, or a file that cannot be read as one (a link, not a file, too large)."""
    import yaml  # a labml dependency; only this message needs it

    try:
        with open_to_read(run_dir / "configs.yaml") as f:
            text = f.read(1 << 20) if os.fstat(f.fileno()).st_size <= 1 << 20 else b""
        url = yaml.safe_load(text)["dashboard"]["computed"]
    except (OSError, UnsafeRunFolder, yaml.YAMLError, KeyError, TypeError):
        return None
    return strip_userinfo(url) if isinstance(url, str) and url.isprintable() and url_problem(url) is None else None


def unknown_run(run_uuid: str, dashboard: str, data_dir: str) -> str:
    """The one line for a run the dashboard does not know: which dashboard was asked, and what the
    run's folder here (if any) says of where the run reports."""
    asked = strip_userinfo(dashboard)
    line = f"RUN_UUID {run_uuid}: expected a run the dashboard at {asked} knows; it has none of that uuid"
    run_dir = next((p for p in Path(data_dir).glob(f"*/{run_uuid}") if p.is_dir()), None)
    if run_dir is None:
        return line + " (a run that reports to another dashboard: add --dashboard URL)"
    elsewhere = recorded_dashboard(run_dir)
    if elsewhere is None:
        return (line + f". Its folder {run_dir} is here, but the run reported to no dashboard: "
                       f"only a run started (or resumed) with --dashboard {asked} can be tweaked there")
    return line + f". Its folder {run_dir} says it reported to {elsewhere}: add --dashboard {elsewhere}"


def failed(e: DashboardError, run_uuid: str, dashboard: str, data_dir: str) -> NoReturn:
    """Exit on the dashboard's answer: code 2 for a refusal of what was asked (its 4xx, or no
    dashboard answering at --dashboard), 1 for a dashboard that failed (its 5xx)."""
    if e.status == 404 and str(e).startswith("unknown run"):
        fail(unknown_run(run_uuid, dashboard, data_dir))
    if e.status is not None and 400 <= e.status < 500:
        fail(str(e))  # the request itself was wrong
    if e.status is None:  # nothing listens there, or what does is no dashboard: --dashboard is wrong
        asked = strip_userinfo(dashboard)
        fail(f"--dashboard {asked}: expected a dashboard answering there (start one: python -m "
             f"experiments.dashboard); {str(e).replace(dashboard.rstrip('/'), asked.rstrip('/'))}")
    fail(str(e), code=1)


PROG = "python -m experiments.tweak"


def run_named(parser: OneLineParser, name: str, data_dir: str) -> str:
    """The uuid RUN_UUID names: itself, or the run under `data_dir` it begins when it is the id the
    dashboard shows (8 or more of the first digits); the parser's one line otherwise."""
    if re.fullmatch(r"[0-9a-f]{8,31}", name):
        try:
            folder = RunFolder.named(Path(data_dir), name, "run")
        except ConfigError as e:
            parser.fail(f"RUN_UUID {name}: expected {e.accepted}")
        name = folder.uuid if folder is not None else name
    if not re.fullmatch(r"[0-9a-f]{32}", name):
        parser.fail(f"RUN_UUID {name!r}: expected the uuid of a run (32 hex digits, as labml prints it), "
                    f"or the first 8 or more of them where one run under --data-dir {data_dir} begins so")
    return name


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    description, examples = docstring_help(__doc__)
    parser = OneLineParser(prog=prog, description=description, epilog=examples)
    parser.add_argument("run_uuid", metavar="RUN_UUID", help="the run, as printed by labml and the dashboard (or the first 8 "
                                                             "or more of its digits, where one run under --data-dir begins so)")
    parser.add_argument("changes", metavar="NAME=VALUE", nargs="*", help="new values; none lists the current ones")
    parser.add_argument("--dashboard", metavar="URL", default=DEFAULT_DASHBOARD_URL,
                        help=f"the dashboard (default: {DEFAULT_DASHBOARD_URL})")
    parser.add_argument("--data-dir", metavar="DIR", default="runs",
                        help="where to look for the run when the dashboard does not know it (default: runs)")
    args = parser.parse_args(argv)

    args.run_uuid = run_named(parser, args.run_uuid, args.data_dir)
    if url_problem(args.dashboard) is not None:  # a URL urllib cannot even split ('http://[::1') included
        parser.fail(f"--dashboard {args.dashboard!r}: expected a URL such as {DEFAULT_DASHBOARD_URL}")
    changes: dict[str, Number] = {}
    for text in args.changes:
        try:
            key, value = parse_assignment(text)
        except ValueError as e:
            parser.fail(str(e))
        changes[key] = value

    try:
        if not changes:
            info = get_hyperparams(args.dashboard, args.run_uuid)
            # Every word of the answer is the dashboard's (any local client can set a run's status,
            # which the refusal quotes): shown with its control characters escaped.
            for key, p in info["params"].items():
                print(escaped(listing_line(key, p)))
            if not info["params"]:
                print(f"run {args.run_uuid} has no live hyperparameters")
            if info.get("refusal"):
                print(escaped(f'changes: refused, {info["refusal"]}'))
            return 0
        pending = set_hyperparams(args.dashboard, args.run_uuid, changes)
    except DashboardError as e:
        failed(e, args.run_uuid, args.dashboard, args.data_dir)
    print(escaped("queued: " + ", ".join(f"{k}={v}" for k, v in pending.items()) +
                  " (the run applies them with its next update)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
