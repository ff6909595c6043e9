"""Change a running experiment's live hyperparameters through the dashboard.

    python -m experiments.tweak RUN_UUID learning_rate=1e-4 epochs=3 [--dashboard URL]
    python -m experiments.tweak RUN_UUID            # list them

The run receives the new values with its next update to the dashboard; a run that is not
running (completed, interrupted, crashed) takes none: the change is refused.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from configs.cli import OneLineParser, docstring_help
from configs.machine import url_problem
from configs.terminal import escaped
from configs.urls import DEFAULT_DASHBOARD as DEFAULT_DASHBOARD_URL
from dashboard.client import DashboardError, get_hyperparams, set_hyperparams

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


PROG = "python -m experiments.tweak"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    description, examples = docstring_help(__doc__)
    parser = OneLineParser(name_in_errors=True, prog=prog, description=description, epilog=examples)
    parser.add_argument("run_uuid", metavar="RUN_UUID", help="the run, as printed by labml and the dashboard")
    parser.add_argument("changes", metavar="NAME=VALUE", nargs="*", help="new values; none lists the current ones")
    parser.add_argument("--dashboard", metavar="URL", default=DEFAULT_DASHBOARD_URL,
                        help=f"the dashboard (default: {DEFAULT_DASHBOARD_URL})")
    args = parser.parse_args(argv)

    if not re.fullmatch(r"[0-9a-f]{32}", args.run_uuid):
        parser.fail(f"RUN_UUID {args.run_uuid!r}: expected the uuid of a run (32 hex digits, as labml prints it)")
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
                print(f"run {args.run_uuid} has no dynamic hyperparameters")
            if info.get("refusal"):
                print(escaped(f'changes: refused, {info["refusal"]}'))
            return 0
        pending = set_hyperparams(args.dashboard, args.run_uuid, changes)
    except DashboardError as e:
        if e.status is not None and 400 <= e.status < 500:
            parser.fail(str(e))  # the request itself was wrong
        print(f"{parser.prog}: error: {escaped(e)}", file=sys.stderr)
        return 1
    print(escaped("queued: " + ", ".join(f"{k}={v}" for k, v in pending.items()) +
                  " (the run applies them with its next update)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
