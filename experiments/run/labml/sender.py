"""labml's sender, made to survive whatever a dashboard answers, and bounded at the run's end.

labml's sender trusts its dashboard: it reads an answer of any size, and an answer that is not a
JSON object, that lists `errors`, or whose `dynamic` part names an unknown key or holds a value
its param cannot track, makes it retry forever, or marks the tracker failed, and the next metric
the trainer saves raises inside labml: the run dies. `harden_sender` replaces its answer handling
in this process:
- an answer is read up to `MAX_ANSWER_BYTES` and only its known parts are kept: `url` when it is a
  printable http(s) URL, `dynamic` when it is an object; `errors` become warnings, never a failure;
  anything else is ignored with one warning (each kind once), and the packets count as delivered
  (they were: it is the answer that is broken), so nothing is retried or lost;
- `dynamic` reaches only registered live hyperparameters, and each param checks its value itself
  (live.py), so a dashboard can propose values, never impose them;
- the configs it sends mark the ones this machine chose with `chosen_by_machine` (why), so the
  dashboard tells them from the ones the user set;
- the dashboard URL's credentials go as HTTP basic authentication, never into the URL labml is
  given (its messages print that URL).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from labml.internal import experiment as labml_experiment
from labml.internal.app import _AppTrackThread
from labml.internal.app.experiment import AppExperiment
from labml.internal.configs.dynamic_hyperparam import DynamicHyperParam

from configs.terminal import escaped
from configs.urls import app_url, split_credentials

MAX_ANSWER_BYTES = 1024 * 1024  # labml-app's answers are a few hundred bytes
MAX_URL_CHARS = 2048
STOCK_SAVE_CONFIGS = AppExperiment.save_configs


class AnswerChecker:
    """The parts of a dashboard's answer labml may act on; each kind of fault warned about once."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.warn, self.warned = warn, set[str]()

    def warn_once(self, kind: str, message: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            self.warn(f"warning: {message}")

    def __call__(self, content: bytes) -> dict[str, Any]:
        if len(content) > MAX_ANSWER_BYTES:
            self.warn_once("size", f"the dashboard answered with more than {MAX_ANSWER_BYTES} bytes; such answers are ignored")
            return {}
        try:
            answer = json.loads(content.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
            self.warn_once("json", "the dashboard answered with something other than JSON; such answers are ignored")
            return {}
        if not isinstance(answer, dict):
            self.warn_once("object", f"the dashboard answered with a JSON {type(answer).__name__}, not an object; such answers are ignored")
            return {}
        checked: dict[str, Any] = {}
        url = answer.get("url")
        if isinstance(url, str) and len(url) <= MAX_URL_CHARS and url.isprintable() and url.startswith(("http://", "https://")):
            checked["url"] = url
        elif url is not None:
            self.warn_once("url", "the dashboard's answer held a run URL that is not a printable http(s) URL; ignored")
        dynamic = answer.get("dynamic")
        if isinstance(dynamic, dict):
            checked["dynamic"] = dynamic
        elif dynamic is not None:
            self.warn_once("dynamic", f"the dashboard sent live values as a {type(dynamic).__name__}, not an object; ignored")
        errors = answer.get("errors")
        for error in errors if isinstance(errors, list) else [errors] if errors is not None else []:
            text = " ".join(str(error.get(k, "")) for k in ("error", "warning", "message")) if isinstance(error, dict) else str(error)
            self.warn_once(f"error:{text[:200]}", f"the dashboard said: {escaped(text.strip()[:200])}")
        return checked


def marked_configs(configs: dict[str, Any], choices: dict[str, str]) -> dict[str, Any]:
    """labml's configs packet with `chosen_by_machine` added to each item the machine chose."""
    return {key: {**item, "chosen_by_machine": choices[key]} if key in choices and isinstance(item, dict) else item
            for key, item in configs.items()}


def harden_sender(dashboard: str, machine_choices: dict[str, str], warn: Callable[[str], None]) -> str:
    """Replace labml's answer handling in this process (see the module's doc) and return the URL
    to give labml as its `app_url`: without credentials, which go with every request instead."""
    check = AnswerChecker(warn)

    def send(thread: Any, data: list[dict[str, Any]]) -> dict[str, Any]:
        # labml's `_AppTrackThread._send`, bounded and checked; failing to reach the dashboard
        # raises as in labml (it reports it and retries).
        request = urllib.request.Request(thread.url, data=json.dumps(data).encode("utf-8"),
                                         headers={"Content-Type": "application/json; charset=utf-8"})
        with urllib.request.urlopen(request, timeout=thread.timeout_seconds) as response:
            return check(response.read(MAX_ANSWER_BYTES + 1))

    def apply_dynamic(handler: Any, data: dict[str, Any]) -> None:
        # labml's `ExperimentDynamicUpdateHandler.handle`, for registered live hyperparameters only.
        for key, value in data.items():
            try:
                param = handler.config_processor.get_value(key)
            except Exception:  # labml's configs raise their own errors for unknown keys
                param = None
            if isinstance(param, DynamicHyperParam):
                param.set_value(value)
            else:
                check.warn_once(f"key:{key[:100]}", f"the dashboard sent a live value for {escaped(key[:100])!r}, "
                                                    "which is no live hyperparameter of this run; ignored")

    def save_configs(experiment: Any, configs: dict[str, Any]) -> None:
        STOCK_SAVE_CONFIGS(experiment, marked_configs(configs, machine_choices))

    _AppTrackThread._send = send
    AppExperiment.save_configs = save_configs
    labml_experiment.ExperimentDynamicUpdateHandler.handle = apply_dynamic
    url, credentials = split_credentials(app_url(dashboard))
    if credentials is not None:
        # Marked as authenticated, the handler sends them with the first request, not after a 401.
        passwords = urllib.request.HTTPPasswordMgrWithPriorAuth()
        passwords.add_password(None, url, *credentials, is_authenticated=True)
        urllib.request.install_opener(urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords)))
    return url


def _release_from_exit(thread: threading.Thread) -> bool:
    """Let the interpreter exit without joining `thread`; False where this Python has no way to.

    labml starts its sender as a non-daemon thread, and the daemon flag cannot be changed once a
    thread runs. CPython (3.7-3.12) joins non-daemon threads at exit by waiting on the locks in
    `threading._shutdown_locks`; removing the thread's lock from that set is exactly what being a
    daemon thread means to the shutdown code.
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
    # Stop it from sending anything more: with `_process` reporting success and an empty queue,
    # its loop returns as soon as the current request or retry pause ends.
    thread.is_stopped = True
    while not thread.queue.empty():
        thread.queue.get_nowait()
    thread._process = lambda packets: True
    return _release_from_exit(thread)


def finish_sending(timeout_s: float, warn: Callable[[str], None]) -> bool:
    """Wait at most `timeout_s` for labml to send the run's last updates; True if all were delivered.

    labml's sender retries forever when the dashboard is unreachable, and the interpreter waits
    for it at exit; after the timeout this gives up on it, so the process exits promptly."""
    threads = [t for t in threading.enumerate() if isinstance(t, _AppTrackThread) and t.is_alive()]
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threads if t.is_alive()]
    if not stuck:
        return True
    if not all([_abandon(t) for t in stuck]):
        warn("warning: this Python cannot skip labml's sender at exit; the exit may wait for its retries")
    return False
