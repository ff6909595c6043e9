"""The tests' runs forked from a zygote (tests/forked_run.py) behave as the same command started by a
plain interpreter: argv, directory, environment (the leftover marker included, as /proc shows it),
our own code imported afresh, exit codes, atexit, real signals; anything the libraries read at
import that differs gets a plain interpreter; and the zygote ends with the process that started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import forked_run, process_table
from tests.conftest import MARK, REPO, Cli


def forkable_env(cli: Cli) -> dict[str, str]:
    """`cli`'s environment as the session began, before a test of this worker set anything in the
    pytest process (a private Ray, a dashboard and torch each set some): the one the zygote has."""
    return dict(forked_run.zygote_env(), **{MARK: cli.marker})

pytestmark = pytest.mark.slow

REPORT = r"""
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran", flush=True))
environ = open(f"/proc/{os.getpid()}/environ", "rb").read().split(b"\0")
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "marker": os.environ.get("BREAKOUT_TEST_MARK"),
    "shown": [e.decode() for e in environ if e.startswith(b"BREAKOUT_TEST_MARK=")],
    "ours": sorted(m for m in sys.modules if m.partition(".")[0] in ("configs", "experiments", "ppo", "game", "dashboard")),
    "torch": "torch" in sys.modules, "parent": os.getppid(), "main": sorted(k for k in globals() if not k.startswith("__")),
}), flush=True)
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_run_is_the_command_a_plain_interpreter_runs(tmp_path: Path) -> None:
    cli = Cli()
    argv = [sys.executable, "-c", REPORT, "3", "an argument"]
    forked = forked_run.run(argv, cwd=tmp_path, env=forkable_env(cli), text=True, timeout=600)
    plain = subprocess.run(argv, cwd=tmp_path, env=forkable_env(cli), capture_output=True, text=True, timeout=600)
    assert forked.returncode == plain.returncode == 3, (forked.stderr[-3000:], plain.stderr[-3000:])
    assert forked.stderr == plain.stderr == ""
    (forked_line, forked_end), (plain_line, plain_end) = forked.stdout.splitlines(), plain.stdout.splitlines()
    assert forked_end == plain_end == "atexit ran"
    seen, expected = json.loads(forked_line), json.loads(plain_line)
    assert seen["torch"] and not expected["torch"]  # it was forked, with torch already imported
    assert seen["parent"] == forked_run.ZYGOTE.pid() != expected["parent"] == os.getpid()
    for report in (seen, expected):
        del report["torch"], report["parent"]
    assert seen == expected == {"argv": ["-c", "3", "an argument"], "cwd": str(tmp_path), "path0": "",
                                "marker": cli.marker, "shown": [f"{MARK}={cli.marker}"], "ours": [], "main": ["atexit", "environ", "json", "os", "sys"]}
    # `python -m`: the module's file as argv[0], the directory first on sys.path, its own exit code
    (tmp_path / "command.py").write_text("import sys\nprint(sys.argv, sys.path[0], flush=True)\nsys.exit(5)\n")
    module = forked_run.run([sys.executable, "-m", "command", "x"], cwd=tmp_path, env=forkable_env(cli), text=True, timeout=600)
    assert (module.returncode, module.stdout) == (5, f"{[str(tmp_path / 'command.py'), 'x']} {tmp_path}\n"), module.stderr


SLEEPER = "import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\nprint('up', flush=True)\ntime.sleep(600)"


def test_signals_reach_the_run_itself_and_its_end_is_read_as_from_a_child() -> None:
    cli = Cli()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        # SIGINT's handler set as an interactive shell leaves it (a background job inherits it ignored)
        process = forked_run.popen([sys.executable, "-c", SLEEPER],
                                   cwd=REPO, env=forkable_env(cli), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert isinstance(process, forked_run.ForkedPopen)
        assert process.stdout is not None and process.stdout.readline() == "up\n"
        assert process.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
        process.send_signal(sig)
        _, err = process.communicate(timeout=600)
        assert process.returncode == -sig, err  # Python dies of an unhandled SIGINT too
        assert ("KeyboardInterrupt" in err) == (sig == signal.SIGINT), err
        assert not process_table.is_alive(process.pid) and process.pid not in process_table.descendants(os.getpid())
    assert cli.leftovers() == []


def test_what_the_libraries_read_at_import_if_changed_gets_a_plain_interpreter() -> None:
    for changed in ({"OMP_NUM_THREADS": "1"}, {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}, {"NEW_VARIABLE": "x"}):
        env = dict(forkable_env(Cli()), **changed)
        process = forked_run.popen([sys.executable, "-c", "import sys; print('torch' in sys.modules)"], cwd=REPO,
                                   env=env, stdout=subprocess.PIPE, text=True)
        out, _ = process.communicate(timeout=600)
        assert type(process) is subprocess.Popen and out == "False\n", changed
    held = forked_run.popen([sys.executable, "-c", "pass"], cwd=REPO, env=dict(forkable_env(Cli()), HOLD_FILE="x"))
    assert isinstance(held, forked_run.ForkedPopen) and held.wait(timeout=600) == 0


ORPHANED = """
import os, time
from tests.forked_run import ZYGOTE
ZYGOTE.socket_path()
print(ZYGOTE.pid(), flush=True)
time.sleep(600)
"""


def test_the_zygote_ends_when_the_process_that_started_it_is_killed() -> None:
    starter = subprocess.Popen([sys.executable, "-c", ORPHANED], cwd=REPO, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert starter.stdout is not None
    zygote = int(starter.stdout.readline())
    assert process_table.is_alive(zygote)
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 120
    while process_table.is_alive(zygote) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_table.is_alive(zygote)
