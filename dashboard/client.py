"""What training scripts and terminals use to talk to the dashboard.

`finish_app_tracking` bounds how long a finished run waits for labml to deliver its
last updates; `get_hyperparams` / `set_hyperparams` are the HTTP API behind
`python -m experiments.tweak`; `compare_line` the comparison page's address that sweeps,
populations and seed runs print.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from dashboard.labml_client import split_credentials

DEFAULT_DASHBOARD_URL = "http://127.0.0.1:5005"
MAX_COMPARED_RUNS = 16  # runs on one comparison page (its API's cap): their curves stay readable

Number = int | float


def _app_track_threads() -> list[threading.Thread]:
    from labml.internal.app import _AppTrackThread

    return [t for t in threading.enumerate() if isinstance(t, _AppTrackThread) and t.is_alive()]


def _release_from_exit(thread: threading.Thread) -> bool:
    """Let the interpreter exit without joining `thread`; False where this Python has no way to.

    labml starts its sender as a non-daemon thread, and the daemon flag cannot be changed
    once a thread runs.  CPython (3.7-3.12) joins non-daemon threads at exit by waiting on
    the locks in `threading._shutdown_locks`; removing the thread's lock from that set is
    exactly what being a daemon thread means to the shutdown code.
    """
    shutdown_locks = getattr(threading, "_shutdown_locks", None)
    shutdown_locks_lock = getattr(threading, "_shutdown_locks_lock", None)
    tstate_lock = getattr(thread, "_tstate_lock", None)
    if shutdown_locks is None or shutdown_locks_lock is None or tstate_lock is None:
        return False
    with shutdown_locks_lock:
        shutdown_locks.discard(tstate_lock)
    thread._daemonic = True  # type: ignore[attr-defined]  # keeps threading's bookkeeping consistent
    return True


def _abandon(thread: Any) -> bool:
    # Stop it from sending anything more: with `_process` reporting success and an empty
    # queue, its loop returns as soon as the current request or retry pause ends.
    thread.is_stopped = True
    while not thread.queue.empty():
        thread.queue.get_nowait()
    thread._process = lambda packets: True
    return _release_from_exit(thread)


def finish_app_tracking(timeout_s: float = 30.0) -> bool:
    """Wait at most `timeout_s` for labml to send the run's last updates to the dashboard.

    Call it after the ``with experiment.start():`` block (or in a ``finally``).  labml's
    sender retries forever when the dashboard is unreachable, and the interpreter waits
    for it at exit; after the timeout this gives up on it with a one-line warning so the
    process exits promptly.  Returns True if everything was delivered.
    """
    threads = _app_track_threads()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threads if t.is_alive()]
    if not stuck:
        return True
    released = all([_abandon(t) for t in stuck])
    url = split_credentials(getattr(stuck[0], "url", "?").split("?")[0])[0]
    note = "" if released else " (this Python cannot skip it at exit; exit may wait for its retries)"
    print(f"warning: the labml dashboard ({url}) did not take the last updates within {timeout_s:g} s; "
          f"giving up on them{note}", file=sys.stderr, flush=True)
    return False


class DashboardError(RuntimeError):
    """The dashboard refused a request (`status` is its HTTP code) or could not be reached (None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def run_url(dashboard_url: str, run_uuid: str) -> str:
    return f'{dashboard_url.rstrip("/")}/run/{urllib.parse.quote(run_uuid, safe="")}'


def hyperparams_url(dashboard_url: str, run_uuid: str) -> str:
    return f'{dashboard_url.rstrip("/")}/hyperparams/{urllib.parse.quote(run_uuid, safe="")}'


def compare_line(dashboard: str, run_uuids: Sequence[str], runs: str) -> str:
    """The line a command that started `runs` (e.g. "trials") prints to show them side by side: the
    comparison page of the first `MAX_COMPARED_RUNS` of them on `dashboard` (its address, or labml's
    app_url), without any credentials the address holds."""
    base = split_credentials(dashboard)[0].split("/api/", 1)[0].rstrip("/")
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
