"""A training process's side of the dashboard: whatever a dashboard answers, the run goes on.

labml's sender trusts its dashboard: it reads an answer of any size, and an answer that is not a
JSON object, that lists `errors`, or whose `dynamic` part names an unknown key or holds a value
its param cannot track, makes it retry forever, or marks the tracker failed, and the next metric
the trainer saves raises inside labml: the run dies.  `use_dashboard` hardens it for this process:
- an answer is read up to `MAX_ANSWER_BYTES` and only its known parts are kept: `url` when it is a
  printable http(s) URL, `dynamic` when it is an object; `errors` become warnings, never a failure;
  anything else is ignored with one warning (each kind once), and the packets count as delivered
  (they were: it is the answer that is broken), so nothing is retried or lost;
- `dynamic` reaches only registered live hyperparameters; each value is checked by its param
  (configs/live.py) before it is applied, so a dashboard can propose values, never impose them;
- the configs it sends mark the ones this machine chose (`note_machine_choices`) with
  `chosen_by_machine` (why), so the dashboard tells them from the ones the user set;
- credentials in the dashboard's URL (``http://user:pass@host``, for an authenticating proxy)
  are sent as HTTP basic authentication and kept out of the URL labml is given, so none of its
  messages (which print that URL) can show them.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
from typing import Any

MAX_ANSWER_BYTES = 1024 * 1024  # labml-app's answers are a few hundred bytes
MAX_URL_CHARS = 2048
_warned: set[str] = set()
_machine_choices: dict[str, str] = {}


def note_machine_choices(choices: dict[str, str]) -> None:
    """The configs of this process's run that the machine chose, each with why (configs/grouping.py
    `machine_choices`); sent with its configs as `chosen_by_machine`."""
    _machine_choices.clear()
    _machine_choices.update(choices)


def marked_configs(configs: dict[str, Any], choices: dict[str, str]) -> dict[str, Any]:
    """labml's configs packet with `chosen_by_machine` added to each item the machine chose."""
    return {key: {**item, "chosen_by_machine": choices[key]} if key in choices and isinstance(item, dict) else item
            for key, item in configs.items()}


def _warn_once(kind: str, message: str) -> None:
    if kind not in _warned:
        _warned.add(kind)
        print(f"warning: {message}", file=sys.stderr, flush=True)


def _printable(text: str, limit: int = 200) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """(`url` without its user:password part, the credentials or None)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    credentials = (urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""))
    return bare, credentials if any(credentials) else None


def use_dashboard(app_url: str) -> str:
    """Harden labml's sender (see the module's doc) and return the URL to give labml as its
    `app_url`: `app_url` without credentials, which are sent with every request to it instead."""
    harden_labml_sender()
    url, credentials = split_credentials(app_url)
    if credentials is not None:
        # Marked as authenticated, the handler sends them with the first request, not after a 401.
        passwords = urllib.request.HTTPPasswordMgrWithPriorAuth()
        passwords.add_password(None, url, *credentials, is_authenticated=True)
        urllib.request.install_opener(urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords)))
    return url


def checked_answer(content: bytes) -> dict[str, Any]:
    """The parts of a dashboard's answer labml may act on; {} for an answer that is not one."""
    if len(content) > MAX_ANSWER_BYTES:
        _warn_once("size", f"the dashboard answered with more than {MAX_ANSWER_BYTES} bytes; such answers are ignored")
        return {}
    try:
        answer = json.loads(content.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
        _warn_once("json", "the dashboard answered with something other than JSON; such answers are ignored")
        return {}
    if not isinstance(answer, dict):
        _warn_once("object", f"the dashboard answered with a JSON {type(answer).__name__}, not an object; "
                             f"such answers are ignored")
        return {}
    checked: dict[str, Any] = {}
    url = answer.get("url")
    if isinstance(url, str) and len(url) <= MAX_URL_CHARS and url.isprintable() and url.startswith(("http://", "https://")):
        checked["url"] = url
    elif url is not None:
        _warn_once("url", "the dashboard's answer held a run URL that is not a printable http(s) URL; ignored")
    dynamic = answer.get("dynamic")
    if isinstance(dynamic, dict):
        checked["dynamic"] = dynamic
    elif dynamic is not None:
        _warn_once("dynamic", f"the dashboard sent live values as a {type(dynamic).__name__}, not an object; ignored")
    errors = answer.get("errors")
    for error in errors if isinstance(errors, list) else [errors] if errors is not None else []:
        text = " ".join(str(error.get(k, "")) for k in ("error", "warning", "message")) if isinstance(error, dict) else str(error)
        _warn_once(f"error:{text[:200]}", f"the dashboard said: {_printable(text.strip())}")
    return checked


def _send(self: Any, data: list[dict[str, Any]]) -> dict[str, Any]:
    """labml's `_AppTrackThread._send`, bounded and checked (`checked_answer`).  Failures to reach
    the dashboard raise as in labml (it reports them and retries)."""
    request = urllib.request.Request(self.url, data=json.dumps(data).encode("utf-8"),
                                     headers={"Content-Type": "application/json; charset=utf-8"})
    with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
        content = response.read(MAX_ANSWER_BYTES + 1)
    return checked_answer(content)


def _apply_dynamic(self: Any, data: dict[str, Any]) -> None:
    """labml's `ExperimentDynamicUpdateHandler.handle`, for registered live hyperparameters only;
    each param checks its value itself (configs/live.py)."""
    from labml.internal.configs.dynamic_hyperparam import DynamicHyperParam

    for key, value in data.items():
        try:
            param = self.config_processor.get_value(key)
        except Exception:  # labml's configs raise their own errors for unknown keys
            param = None
        if isinstance(param, DynamicHyperParam):
            param.set_value(value)
        else:
            _warn_once(f"key:{key[:100]}", f"the dashboard sent a live value for {_printable(key, 100)!r}, "
                                           f"which is no live hyperparameter of this run; ignored")


def harden_labml_sender() -> None:
    """Replace labml's answer handling in this process (idempotent)."""
    from labml.internal import experiment as labml_experiment
    from labml.internal.app import _AppTrackThread
    from labml.internal.app.experiment import AppExperiment

    _AppTrackThread._send = _send
    if not getattr(AppExperiment.save_configs, "marks_machine_choices", False):
        stock_save_configs = AppExperiment.save_configs

        def save_configs(self: Any, configs: dict[str, Any]) -> None:
            stock_save_configs(self, marked_configs(configs, _machine_choices))

        save_configs.marks_machine_choices = True  # type: ignore[attr-defined]
        AppExperiment.save_configs = save_configs
    labml_experiment.ExperimentDynamicUpdateHandler.handle = _apply_dynamic
