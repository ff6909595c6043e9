"""The zygote: a Python that has imported the heavy libraries a test's command line needs (torch and
the parts of it the optimiser loads, numpy, OpenCV, gymnasium and the games, labml) once, and
forks each test's run from itself, so a run skips the seconds of imports (tests/forked_run.py asks
for runs). It imports nothing of this project: each child imports our code afresh and runs the
command's `main` exactly as `python -m module args` or `python -c code args` would, then leaves
through the interpreter's own exit (exit codes, tracebacks, atexit, death by SIGINT).

Started as `python -c BOOT this_file socket_path ROOM` (ROOM: blanks, room for a run's command line); it serves until its stdin closes (the pytest
process that started it ended, however it ended) or it is interrupted."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import threading

# Runs in the zygote's __main__: `serve` returns only in a forked child, after it ran the command.
BOOT = """
def _zygote():
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("_test_zygote", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.serve(sys.argv[2])
_zygote()
"""

PRELOAD = ("numpy", "cv2", "gymnasium", "ale_py", "torch", "torch.optim", "torch._dynamo", "yaml", "git",
           "labml.experiment", "labml.tracker", "labml.monit", "labml.internal.app.experiment",
           "matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg")  # not pyplot: it picks a backend
# labml keeps its lab, logger, experiment... in singletons made on first use: none may exist yet.
LABML_SINGLETONS = ("lab", "logger", "experiment", "monitor", "tracker")
MARK = "BREAKOUT_TEST_MARK"
OUR_PACKAGES = {"configs", "game", "ppo", "experiments", "dashboard", "tests"}  # setup.py's, and the tests
MESSAGE_BYTES = 1 << 20


def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    for name in LABML_SINGLETONS:
        assert importlib.import_module(f"labml.internal.{name}")._internal is None, name
    import matplotlib
    # Its configuration folder is its own, not a temporary one that its exit hook would delete
    # (in every child, once each had exited).
    assert not matplotlib.get_configdir().startswith(tempfile.gettempdir()), matplotlib.get_configdir()
    # By package name, not by path: the virtual environment may lie inside the checkout (.venv).
    ours = sorted(name for name in sys.modules if name.partition(".")[0] in OUR_PACKAGES)
    assert ours == [], f"the zygote imported the project's own modules: {ours}"
    # What these read of the environment may differ from run to run (tests/forked_run.py RUN_TIME_PREFIXES).
    assert not {"ray", "labml_app"} & sys.modules.keys(), "the zygote imported Ray or labml-app"
    # The objects imported so far are never collected: the children's collections skip them, so
    # they do not copy the pages those objects live on.
    gc.freeze()


def serve(socket_path: str) -> None:
    preload()
    server = Server(socket_path)
    try:
        request = server.next_child()
    except KeyboardInterrupt:  # Ctrl-C of the pytest it serves
        return
    if request is None:  # the pytest process that started it is gone
        os.unlink(socket_path)
        os.rmdir(os.path.dirname(socket_path))
        return
    server.close()
    become(*request)


class Server:
    """The zygote's one thread: it accepts clients, forks their runs and tells them how each ended."""

    def __init__(self, socket_path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(socket_path)
        self.listener.listen(64)
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through the pipe
        signal.set_wakeup_fd(self.wake_write)
        self.selector = selectors.DefaultSelector()
        for source in (self.listener, self.wake_read, 0):
            self.selector.register(source, selectors.EVENT_READ)
        self.runs: dict[int, Run] = {}
        self.clients: dict[socket.socket, int | None] = {}
        os.write(1, b"ready\n")

    def next_child(self) -> tuple[dict, list[int]] | None:
        """Serves until its stdin closes (None) or, in a forked child, returns that child's request."""
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    connection, _ = self.listener.accept()
                    self.clients[connection] = None
                    self.selector.register(connection, selectors.EVENT_READ)
                elif key.fileobj == 0:
                    if not os.read(0, 4096):
                        return None
                elif key.fileobj == self.wake_read:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_read, 4096):
                            pass
                    report_exits(self.runs)
                else:
                    assert isinstance(key.fileobj, socket.socket)
                    request = answer(key.fileobj, self.clients, self.runs, self.selector)
                    if request is not None:
                        return request

    def close(self) -> None:
        self.selector.close()
        for connection in (self.listener, *self.clients):
            connection.close()
        os.close(self.wake_read)
        os.close(self.wake_write)


class Run:
    """A forked run as the zygote tracks it: its client's connection (None once the client hung
    up) and whether its exit status was sent."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection: socket.socket | None = connection
        self.told = False


def answer(connection: socket.socket, clients: dict[socket.socket, int | None], runs: dict[int, Run],
           selector: selectors.BaseSelector) -> tuple[dict, list[int]] | None:
    """A client's message: a run to start (returns it, in the child), "reap" once it has read the
    run's exit status, or its hang-up."""
    message, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 3)
    pid = clients.get(connection)
    if message == b"reap" or not message:
        if pid is not None:
            runs[pid].connection = None
            if runs[pid].told:  # it has exited: reaped now (after a hang-up, else when it exits)
                os.waitpid(pid, 0)
                del runs[pid]
        if message:
            connection.send(b"reaped")
        selector.unregister(connection)
        del clients[connection]
        connection.close()
        return None
    request = json.loads(message)
    assert threading.active_count() == 1, threading.enumerate()  # only the main thread may fork
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        return request, fds
    for fd in fds:
        os.close(fd)
    clients[connection] = pid
    runs[pid] = Run(connection)
    connection.send(json.dumps({"pid": pid}).encode())
    return None


def report_exits(runs: dict[int, Run]) -> None:
    """Tells each client whose run ended its exit status, as Popen reads it, leaving the run a
    zombie until the client says it has read it (so its pid is not reused while a test may signal
    it); reaps at once the runs whose client hung up."""
    for pid, run in list(runs.items()):
        ended = None if run.told else os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if ended is None:
            continue
        if run.connection is None:
            os.waitpid(pid, 0)
            del runs[pid]
            continue
        code = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status
        run.told = True
        try:
            run.connection.send(json.dumps({"returncode": code}).encode())
        except OSError:  # the client is gone: its hang-up, read next, reaps it
            pass


def become(request: dict, fds: list[int]) -> None:
    """In the forked child: take the test's stdin/stdout/stderr, directory, environment, session,
    argv and umask, then run the command as the interpreter would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    mode, target, args = request["mode"], request["target"], request["args"]
    show(request["env"].get(MARK, ""), [sys.executable, mode, target, *args])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [mode, *args]
    sys.orig_argv = [sys.executable, mode, target, *args]
    sys.path[0] = os.getcwd() if mode == "-m" else ""
    importlib.invalidate_caches()
    # What a fresh interpreter draws anew: numpy's global generator, multiprocessing's secret.
    import multiprocessing.process

    import numpy
    numpy.random.seed()
    multiprocessing.process.current_process().authkey = os.urandom(32)
    main = sys.modules["__main__"]
    del main.__dict__["_zygote"]
    sys.modules.pop("_test_zygote", None)
    if mode == "-m":
        import runpy
        runpy._run_module_as_main(target)  # type: ignore[attr-defined]  # what `python -m` calls
    else:
        exec(compile(target, "<string>", "exec"), main.__dict__)


def show(marker: str, argv: list[str]) -> None:
    """Writes, where /proc/PID reads them (and so tests/process_table.py, psutil, ps), what a
    forked process would otherwise show of its parent: the run's marker over the zygote's
    placeholder of the same length, in the environment block the process started with, and the
    run's command line over the zygote's (its room padded at start, the rest zeroed)."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    arg_start, arg_end, env_start, env_end = (int(field) for field in fields[45:49])  # fields 48 to 51
    command = b"\0".join(os.fsencode(part) for part in argv)[:arg_end - arg_start - 1]
    ctypes.memmove(arg_start, command.ljust(arg_end - arg_start, b"\0"), arg_end - arg_start)
    block = ctypes.string_at(env_start, env_end - env_start)
    at = block.find(f"{MARK}={'0' * 32}\0".encode())
    if at != -1 and marker:
        assert len(marker) == 32, marker
        ctypes.memmove(env_start + at + len(MARK) + 1, marker.encode(), 32)
