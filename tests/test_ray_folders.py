"""A private Ray's folder (`ray-private-*`) that a process killed with SIGKILL left behind is removed
by the next private Ray's start, and no other folder is: not one whose owner lives, not one a
process still uses, not another account's, not a link, not one whose owner is not known. A start
that fails part-way leaves none of the processes it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_setup.installed import ray_installed
from ray_setup.token_folder import OWNER_FILE
from ray_setup.token_folder import PRIVATE_PREFIX as PREFIX
from tests.conftest import REPO, Cli

pytestmark = pytest.mark.ray
requires_ray = pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[ray]")')

# A process that starts a private Ray, prints its folder and waits to be killed.
RAY_THEN_WAIT = ("import time; from ray_setup.private import start_private_ray, _private; "
                 "start_private_ray(1); print(_private['folder'], flush=True); time.sleep(600)")
# A folder made as a private Ray's is (0700, its owner file), without starting Ray; then `wait`.
FOLDER_ONLY = ("import sys, tempfile, time; from pathlib import Path; from ray_setup import token_folder as s; "
               "f = Path(tempfile.mkdtemp(prefix=s.PRIVATE_PREFIX)); s.write_owner(f); print(f, flush=True); "
               "time.sleep(600 if sys.argv[1] == 'wait' else 0)")
# The next start, in a process whose first start fails part-way: the object store's folder is missing,
# which Ray finds once its GCS, monitor and API server run, and raises without stopping them.
NEXT_START = """
import psutil
from ray_setup.private import start_private_ray, stop_ray
try:
    start_private_ray(1, _plasma_directory="/nonexistent")
except ValueError:
    pass
left = [" ".join(p.cmdline())[:200] for p in psutil.Process().children(recursive=True)]
assert left == [], left
start_private_ray(1)
stop_ray()
"""


def started(cli: Cli, tmp: Path, code: str, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], Path]:
    """A Python process running `code` with `tmp` as its temporary folder, once it has printed its folder."""
    process = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**cli.env(), "TMPDIR": str(tmp), **(env or {})})
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith(str(tmp / PREFIX)), (line, process.stderr.read() if process.poll() is not None else "")
    return process, Path(line)


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A temporary folder for the processes with a short path: Ray's Unix sockets lie deep in it,
    and a socket's path may not pass 107 bytes (pytest's tmp_path is too long)."""
    with tempfile.TemporaryDirectory(prefix="rf-") as folder:
        yield Path(folder)


@requires_ray
def test_the_next_private_ray_removes_only_the_folders_of_dead_owners_whose_ray_is_gone(cli: Cli, tmp: Path) -> None:
    killed, killed_folder = started(cli, tmp, RAY_THEN_WAIT)
    assert (killed_folder / "auth_token").exists() and (killed_folder / "ray").is_dir()
    os.kill(killed.pid, signal.SIGKILL)  # the owner only, as a sweep's or population's process is killed
    killed.wait()
    assert cli.leftovers() == []  # its Ray's servers and workers stop once it is gone
    living, living_folder = started(cli, tmp, FOLDER_ONLY, "wait")
    ended_owner, in_use_folder = started(cli, tmp, FOLDER_ONLY, "exit")
    ended_owner.wait()
    # Its owner is dead, but a process of its Ray (say) still names it: kept until that ends.
    user = subprocess.Popen(["sleep", "600"], env={**cli.env(), "RAY_AUTH_TOKEN_PATH": str(in_use_folder / "auth_token")})
    ended_owner, dead_folder = started(cli, tmp, FOLDER_ONLY, "exit")
    ended_owner.wait()
    dead_owner = (dead_folder / OWNER_FILE).read_text()
    unknown = tmp / f"{PREFIX}unknown"  # no owner file: made by an older version, or being made
    unknown.mkdir(mode=0o700)
    link = tmp / f"{PREFIX}link"
    link.symlink_to(dead_folder.with_name("target"))
    (dead_folder.with_name("target")).mkdir()
    (dead_folder.with_name("target") / OWNER_FILE).write_text(dead_owner)
    kept = [living_folder, in_use_folder, unknown, link, dead_folder.with_name("target")]
    if os.getuid() == 0:  # only root can make a folder of another account's
        theirs = tmp / f"{PREFIX}theirs"
        theirs.mkdir(mode=0o700)
        (theirs / OWNER_FILE).write_text(dead_owner)
        os.chown(theirs, 65534, 65534)
        kept.append(theirs)
    try:
        result = subprocess.run([sys.executable, "-c", NEXT_START], cwd=REPO, env={**cli.env(), "TMPDIR": str(tmp)},
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert not killed_folder.exists() and not dead_folder.exists()
        assert sorted(tmp.iterdir()) == sorted(kept)  # the next start's own folder went as it ended
        assert (living_folder / OWNER_FILE).exists() and (in_use_folder / OWNER_FILE).exists()
    finally:
        for process in (living, user):
            process.kill()
            process.wait()
    assert cli.leftovers() == []
