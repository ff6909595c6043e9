"""`python -m module args` and `python -c code args` for the tests, forked from this pytest process's
zygote (tests/zygote.py), which has already imported torch, numpy, the games and labml: the seconds
each run would spend importing them are spent once per pytest process instead.

The run is still a fresh process running the real command: the same `main` with the same argv, our
own code imported anew, the test's stdin/stdout/stderr, directory, environment, umask and session.
What the test holds is a Popen whose pid is the run itself, so signals (SIGKILL included) reach
the run directly, and whose returncode is the run's, read from the zygote (its parent), which keeps
the run a zombie until the test has read it, as a Popen parent would.

A run is forked only where that cannot change what it does: the environment must be the one the
zygote started with (the libraries read some of it once, at import), apart from variables read
only at run time (RUN_TIME_ONLY). Anything else starts a plain interpreter, as does
BREAKOUT_TESTS_NO_ZYGOTE=1 for the whole session.

A forked run finds its zygote's socket in SHARED, so that a run that starts runs of its own (the
chaos harness, tests/chaos.py) forks them from the same zygote instead of paying the imports again."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.zygote import BOOT, MARK, MESSAGE_BYTES

SHARED = "BREAKOUT_TESTS_ZYGOTE"

REPO = Path(__file__).resolve().parents[1]
# PYTHONBREAKPOINT is read at each breakpoint() call, not at start-up; ray.init sets it in the
# pytest process whenever a test starts a private Ray there.
# TORCHINDUCTOR_CACHE_DIR, which torch sets in the pytest process on first use, is read at use too.
# HOLD_* and SIGTERM_TO are read only by the tests' own hooks inside the run, once it runs
# (conftest's HELD_RUN, test_sweep's TRIAL, test_pbt_resume's HELD_MEMBERS, test_cluster_faults'
# HELD_DRIVER, test_console's and test_run_safety_signals' own).
RUN_TIME_ONLY = frozenset({MARK, SHARED, "PYTEST_CURRENT_TEST", "HOLD_FILE", "HOLD_UNTIL", "HOLD_DIR", "HOLD_AT_START",
                           "HOLD_SIGINT_IGNORED", "SIGTERM_TO", "PYTHONBREAKPOINT", "TORCHINDUCTOR_CACHE_DIR"})
# Read only by libraries the zygote never imports (Ray, labml-app: tests/zygote.py checks), and set
# in the pytest process itself by a private Ray or a dashboard a test starts there.
RUN_TIME_PREFIXES = ("RAY_", "LABML_APP_SERVER_")
# The Popen arguments a forked run honours; any other starts a plain interpreter.
HONOURED = frozenset({"cwd", "env", "stdin", "stdout", "stderr", "text", "start_new_session"})
# The environment before any test changed it (this module is imported with tests/conftest.py).
SESSION_ENV = dict(os.environ)


def zygote_env() -> dict[str, str]:
    """The session's environment as the tests' runs get it, with a placeholder for the marker that
    each run writes its own over (tests/zygote.py `show`)."""
    env = dict(SESSION_ENV, PYTHONUNBUFFERED="1", **{MARK: "0" * 32})
    env.pop("labml_app_url", None)
    return env


class Zygote:
    """This process's zygote, started on the first run that can be forked, stopped by `stop` (at
    the session's end) or, whatever way this process ends, when its stdin reaches end of file."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.folder: str | None = None

    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def lent(self) -> bool:
        """Whether this process was forked by a zygote that still serves (see SHARED)."""
        return self.process is None and os.path.exists(os.environ.get(SHARED, "") or "/nonexistent")

    def socket_path(self) -> str:
        if self.lent():
            return os.environ[SHARED]
        if self.process is None:
            self.folder = tempfile.mkdtemp(prefix="zygote-")
            path = os.path.join(self.folder, "socket")
            self.process = subprocess.Popen([sys.executable, "-c", BOOT, str(REPO / "tests" / "zygote.py"), path, " " * 8192],
                                            cwd=REPO, env=zygote_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert self.process.stdout is not None
            ready = self.process.stdout.readline()
            self.process.stdout.close()
            assert ready == b"ready\n", f"the zygote did not start (exit {self.process.wait()}); its stderr is above"
        assert self.folder is not None
        return os.path.join(self.folder, "socket")

    def stop(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)  # the zygote removes it as it ends, unless killed
            self.folder = None


ZYGOTE = Zygote()


def forkable(argv: list[str], kwargs: dict[str, Any]) -> bool:
    if os.environ.get("BREAKOUT_TESTS_NO_ZYGOTE") == "1" or set(kwargs) - HONOURED:
        return False
    if len(argv) < 3 or argv[0] != sys.executable or argv[1] not in ("-m", "-c"):
        return False
    env = kwargs.get("env") or dict(os.environ)
    return len(env.get(MARK, "0" * 32)) == 32 and differing_variables(env) == []


def differing_variables(env: dict[str, str]) -> list[str]:
    """The variables of `env` that the zygote's imports may have read otherwise (none: forkable)."""
    base = zygote_env()
    return sorted(name for name in (env.keys() | base.keys()) - RUN_TIME_ONLY
                  if not name.startswith(RUN_TIME_PREFIXES) and env.get(name) != base.get(name))


def popen(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)`, forked from the zygote where it can be (see the top)."""
    return ForkedPopen(argv, **kwargs) if forkable(argv, kwargs) else subprocess.Popen(argv, **kwargs)


def run(argv: list[str], timeout: float | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, timeout=timeout, **kwargs)` through `popen`."""
    with popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            process.kill()
            expired.stdout, expired.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def marked(pid: int, marker: str | None, timeout_s: float = 60.0) -> None:
    """Until the forked run shows its marker in /proc (it writes it over the zygote's placeholder
    first thing), so that a search for the test's processes finds it from the moment Popen returns,
    as it finds a plain child; at once for a run without one, or one that has already ended."""
    if marker is None:
        return
    wanted, deadline = f"{MARK}={marker}".encode(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if wanted in Path(f"/proc/{pid}/environ").read_bytes():
                return
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return  # ended (a zombie until the test reads its exit)
        except OSError:
            return
        time.sleep(0.001)


def umask() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError("no Umask in /proc/self/status")


class ForkedPopen(subprocess.Popen):
    """A Popen whose child the zygote forks (Popen's own pipes, text mode and communicate are kept:
    only starting the child, and reading how it ended, go through the zygote)."""

    _connection: socket.socket

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,  # type: ignore[override]
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                       restore_signals, gid, gids, uid, umask_, start_new_session, process_group) -> None:
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        path = ZYGOTE.socket_path()
        request = {"mode": args[1], "target": args[2], "args": list(args[3:]), "env": dict(env or os.environ, **{SHARED: path}),
                   "cwd": os.path.abspath(cwd or os.getcwd()), "umask": umask(), "new_session": bool(start_new_session)}
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            connection.connect(path)
            socket.send_fds(connection, [json.dumps(request).encode()], fds)
            reply = connection.recv(MESSAGE_BYTES)
            assert reply, "the zygote ended without forking the run"
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        self.pid = json.loads(reply)["pid"]
        self._child_created = True
        marked(self.pid, request["env"].get(MARK))
        # As Popen does once its child is started: the child's ends of the pipes are the child's.
        if p2cread != -1 and p2cwrite != -1 and p2cread != getattr(self, "_devnull", None):
            os.close(p2cread)
        if c2pwrite != -1 and c2pread != -1 and c2pwrite != getattr(self, "_devnull", None):
            os.close(c2pwrite)
        if errwrite != -1 and errread != -1 and errwrite != getattr(self, "_devnull", None):
            os.close(errwrite)
        if hasattr(self, "_devnull"):
            os.close(self._devnull)
        self._closed_child_pipe_fds = True

    def _internal_poll(self, _deadstate=None, _waitpid=None, _WNOHANG=None, _ECHILD=None):  # type: ignore[override]
        if self.returncode is None:
            self._ended(0)
        return self.returncode

    def _wait(self, timeout):  # type: ignore[override]
        if self.returncode is None and not self._ended(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _ended(self, timeout: float | None) -> bool:
        """Whether the run has ended, waiting up to `timeout` (None: for as long as it takes); once
        it has, its returncode is set and the zygote reaps it."""
        if not select.select([self._connection], [], [], timeout)[0]:
            return False
        message = self._connection.recv(MESSAGE_BYTES)
        assert message, f"the zygote ended before run {self.pid} did"
        code = json.loads(message)["returncode"]
        with contextlib.suppress(OSError):
            self._connection.send(b"reap")
            self._connection.recv(64)
        self._connection.close()
        self.returncode = code
        return True
