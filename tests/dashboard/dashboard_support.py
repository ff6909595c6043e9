"""Test helpers: a real dashboard subprocess on a free port, real labml runs against it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import process_table

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("probe_run.py")
# Generous safety nets so a broken build fails instead of hanging; no test asserts speed.
STARTUP_LIMIT_S = 300.0
RUN_LIMIT_S = 600.0  # a cap on waits that end at their event: a loaded machine may need minutes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every process the tests start carries this, so leftovers are found even after they
# were re-parented to init.
TEST_MARK = f"DASHBOARD_TEST_MARK={uuid.uuid4().hex}"


def marked_processes() -> set[int]:
    """Live (non-zombie) processes whose environment carries TEST_MARK."""
    return set(process_table.marked(*TEST_MARK.split("=")))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    key, value = TEST_MARK.split("=")
    env[key] = value
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("labml_app_url", None)
    return env


class Process:
    """A subprocess whose merged stdout/stderr is collected line by line in the background."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.proc = subprocess.Popen(args, cwd=cwd, env=env or child_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace",
                                     start_new_session=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, predicate: Callable[[str], bool], limit_s: float = RUN_LIMIT_S) -> str:
        """The first output line matching `predicate`; fails if the process ends without one."""
        with self._changed:
            ok = self._changed.wait_for(
                lambda: any(predicate(x) for x in self.lines) or not self._reader.is_alive(), limit_s)
            for line in self.lines:
                if predicate(line):
                    return line
        state = "still running" if ok is False else f"exited with {self.proc.poll()}"
        raise AssertionError(f"{self.args[1:3]} {state} without the expected line; output:\n{self.output}")

    def wait(self, limit_s: float = RUN_LIMIT_S) -> int:
        try:
            rc = self.proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.args[1:3]} did not exit; output:\n{self.output}") from None
        self._reader.join(10)
        return rc

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(30)

    def kill(self) -> None:
        """SIGKILL the whole session (the process and anything it started)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Dashboard(Process):
    def __init__(self, data_dir: Path, port: int | None = None, options: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__([sys.executable, "-m", "experiments.dashboard", "--port", str(self.port),
                          "--data", str(data_dir), *options], cwd=REPO)

    def wait_ready(self) -> Dashboard:
        self.wait_for_line(lambda line: line.startswith("Dashboard running at"), STARTUP_LIMIT_S)
        return self

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON or text); never raises for HTTP error statuses."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                status, content = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, content = e.code, e.read()
        text = content.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


class ProbeRun(Process):
    """tests/dashboard/probe_run.py (or another `script` beside it) as a labml project of its own,
    sending to `app_url`."""

    def __init__(self, folder: Path, app_url: str, *args: str, script: Path = PROBE) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(script, folder / script.name)
        # app_open_browser: labml would otherwise open the run page in a browser.
        (folder / ".labml.yaml").write_text(f"app_url: {app_url}\napp_open_browser: false\n"
                                            f"check_repo_dirty: false\n")
        super().__init__([sys.executable, str(folder / script.name), *args], cwd=folder)

    def run_uuid(self) -> str:
        return self.wait_for_line(lambda line: line.startswith("RUN_UUID=")).split("=", 1)[1].strip()


def finished_probe_run(dashboard_url: str, folder: Path, updates: str) -> tuple[str, ProbeRun]:
    """A probe run of `updates` updates sent to the dashboard to its end, on labml's own client and
    nothing of ours: its uuid, and the finished process (for its output)."""
    probe = ProbeRun(folder, f"{dashboard_url}/api/v1/default", updates)
    run_uuid = probe.run_uuid()
    assert probe.wait() == 0, probe.output
    return run_uuid, probe


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=RUN_LIMIT_S)
