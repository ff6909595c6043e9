"""`RunFolder`'s reading of who runs a run (labml's `run.pid`), alone: what a population's next
segment polls while the previous segment's process exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from experiments.run.folders import RunFolder


def test_the_owner_is_read_from_run_pid_alone_and_never_through_a_link(tmp_path: Path) -> None:
    """What a population's next segment polls while the last one's process exits (issue 70: it
    walked the whole folder every 50 ms): run.pid alone, a live pid an owner, a dead one or a link
    none."""
    folder = RunFolder(tmp_path / "runs" / ("a" * 32), "a" * 32)
    folder.path.mkdir(parents=True)
    assert folder.owner() is None  # no run.pid
    (folder.path / "run.pid").write_text(f"{os.getpid()}\n")
    assert folder.owner() == os.getpid()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    (folder.path / "run.pid").write_text(f"{ended.pid}\n")
    assert folder.owner() is None  # its process has ended
    elsewhere = tmp_path / "elsewhere.pid"
    elsewhere.write_text(f"{os.getpid()}\n")
    (folder.path / "run.pid").unlink()
    (folder.path / "run.pid").symlink_to(elsewhere)
    assert folder.owner() is None  # a link is no run.pid of labml's
