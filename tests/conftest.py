"""Shared helpers: run the real CLI, and find leftover processes through the process table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def processes_marked(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries `marker`.

    Every process a run starts (workers, the forkserver, the resource tracker) inherits the
    environment, so this finds orphans even after they were re-parented to init.
    """
    needle = f"BREAKOUT_TEST_MARK={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                status = (entry / "status").read_text()
                if "\nState:\tZ" not in status:  # a zombie is already dead
                    found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def wait_until_no_processes(marker: str, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := processes_marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class Cli:
    """Runs `python -m <module> ...` from the repo with a unique marker in its environment."""

    def __init__(self) -> None:
        self.marker = uuid.uuid4().hex

    def env(self) -> dict[str, str]:
        env = dict(os.environ, BREAKOUT_TEST_MARK=self.marker, PYTHONUNBUFFERED="1")
        env.pop("labml_app_url", None)
        return env

    def run(self, module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def start(self, module: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def leftovers(self) -> list[int]:
        return wait_until_no_processes(self.marker)


@pytest.fixture
def cli() -> Cli:
    return Cli()
