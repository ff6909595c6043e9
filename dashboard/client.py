"""The dashboard's HTTP API for the commands that steer runs through it (`tweak`, `pbt`):
`get_hyperparams` / `set_hyperparams`; and `compare_line`, the comparison page's address that
sweeps, populations and seed runs print. A training run reaches the dashboard through labml's own
sender instead (experiments/run/labml/)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from configs.urls import dashboard_page, split_credentials

MAX_COMPARED_RUNS = 16  # runs on one comparison page (its API's cap): their curves stay readable

Number = int | float


class DashboardError(RuntimeError):
    """The dashboard refused a request (`status` is its HTTP code) or could not be reached (None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def compare_line(dashboard: str, run_uuids: Sequence[str], runs: str) -> str:
    """The line a command that started `runs` (e.g. "trials") prints to show them side by side: the
    comparison page of the first `MAX_COMPARED_RUNS` of them on `dashboard` (its address, or labml's
    app_url), without any credentials the address holds."""
    base = dashboard_page(split_credentials(dashboard)[0])
    shown = run_uuids[:MAX_COMPARED_RUNS]
    which = f"the {len(shown)} {runs}" if len(shown) == len(run_uuids) else f"the first {len(shown)} of {len(run_uuids)} {runs}"
    return f"compare {which} on the dashboard: {base}/compare?runs={','.join(urllib.parse.quote(u, safe='') for u in shown)}"


def _api(dashboard_url: str, run_uuid: str) -> str:
    return f'{dashboard_url.rstrip("/")}/api/v1/hyperparams/{urllib.parse.quote(run_uuid, safe="")}'


def _request(req: urllib.request.Request, timeout_s: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read().decode("utf-8"))["error"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {e.code} {e.reason}"
        raise DashboardError(message, e.code) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DashboardError(f"cannot reach the dashboard at {req.full_url}: {reason}") from None
    except ValueError as e:  # not JSON: probably not a dashboard
        raise DashboardError(f"{req.full_url} did not answer with JSON: {e}") from None


def get_hyperparams(dashboard_url: str, run_uuid: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """The run's dynamic hyperparameters: {'run_uuid', 'name', 'params': {key: {...}}}."""
    return _request(urllib.request.Request(_api(dashboard_url, run_uuid)), timeout_s)


def set_hyperparams(dashboard_url: str, run_uuid: str, values: Mapping[str, Number], *,
                    timeout_s: float = 10.0, next_leg: bool = False) -> dict[str, Number]:
    """Queue new values for the run; they reach it with its next update. Returns all pending values.
    `next_leg`: a run that is not running takes them when its next leg (a --resume) starts."""
    url = _api(dashboard_url, run_uuid) + ("?when=next-leg" if next_leg else "")
    req = urllib.request.Request(url, method="POST",
                                 data=json.dumps(dict(values)).encode("utf-8"),
                                 headers={"Content-Type": "application/json"})
    return _request(req, timeout_s)["pending"]
