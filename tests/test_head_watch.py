"""`HeadWatch`, which every driver on a cluster reads to tell a lost head from a busy one, against
real sockets on this machine: a port that listens answers, one that nothing holds refuses.

The head's raylet goes before its GCS (tools/local_cluster.py ends the node's other processes once
its raylet has ended; a real head goes the same way when its raylet crashes): the runs on it fail at
once while the GCS still answers. tests/test_cluster_faults.py holds the GCS up through a whole
lost-head test; these check each port's part alone.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_setup.head_watch import HeadWatch
from tests import forked_run
from tests.conftest import REPO


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def closed() -> int:
    """A port on 127.0.0.1 that nothing holds: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_head_whose_gcs_refuses_is_lost(closed: int) -> None:
    watch = HeadWatch(f"127.0.0.1:{closed}")  # before the driver has looked at the cluster: its GCS alone
    assert watch.refuses_now() is True and watch.lost.is_set()


def test_a_head_whose_raylet_refuses_is_lost_while_its_gcs_still_answers(listening: int, closed: int) -> None:
    assert HeadWatch(f"127.0.0.1:{listening}", [("127.0.0.1", closed)]).refuses_now() is True


def test_a_head_that_answers_on_both_ports_is_not_lost(listening: int) -> None:
    watch = HeadWatch(f"127.0.0.1:{listening}", [("127.0.0.1", listening)])
    assert watch.refuses_now() is False and not watch.lost.is_set()


def test_the_watch_sets_its_event_when_the_head_goes_and_sends_no_signal(listening: int) -> None:
    """The watch's thread sees a port close and sets `lost`; no signal reaches this process (a
    SIGINT would raise KeyboardInterrupt here, a person's stop)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        watch = HeadWatch(f"127.0.0.1:{port}", period_s=0.01).start()
        try:
            assert not watch.lost.wait(0.2)  # it answers: not lost
        finally:
            server.close()
        try:
            assert watch.lost.wait(60)
        finally:
            watch.stop()


def test_a_ray_client_address_is_not_watched() -> None:
    watch = HeadWatch("ray://127.0.0.1:10001").start()
    assert watch.refuses_now() is False and watch.ports == []
    watch.stop()


@pytest.mark.parametrize("kind", ["missing", "empty", "a folder", "a FIFO", "an empty default"])
def test_a_token_file_that_is_not_one_is_refused_in_one_line_before_ray_reads_it(
        cli, tmp_path: Path, kind: str, closed: int) -> None:
    """F3 (issue 71): a token file missing, empty or a folder (or an empty ~/.ray/auth_token) ended a
    joining driver with exit 1 and no line; a FIFO made it hang. Nothing needs to answer at the
    address: the token is checked first."""
    token, home = tmp_path / "token", tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    env = {"RAY_AUTH_TOKEN_PATH": str(token), "HOME": str(home)}
    if kind == "empty":
        token.write_text("")
    elif kind == "a folder":
        token.mkdir()
    elif kind == "a FIFO":
        os.mkfifo(token)
    elif kind == "an empty default":
        token = home / ".ray" / "auth_token"
        token.write_text("\n")
        env = {"HOME": str(home)}
    environ = {k: v for k, v in cli.env().items() if not k.startswith("RAY_AUTH")} | env
    result = forked_run.run([sys.executable, "-m", "experiments.breakout", "--backend", "ray", "--ray-address",
                             f"127.0.0.1:{closed}", "--updates", "1", "--data-dir", str(tmp_path / "runs")],
                            cwd=REPO, env=environ, text=True, timeout=120)
    where = f"RAY_AUTH_TOKEN_PATH={token}" if "RAY_AUTH_TOKEN_PATH" in env else str(token)
    why = {"missing": "No such file or directory", "empty": "it is empty", "a folder": "this is a folder, FIFO, device or socket",
           "a FIFO": "this is a folder, FIFO, device or socket", "an empty default": "it is empty"}[kind]
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {where}: expected the cluster's token file (a regular file holding the token, mode 0600); {why}\n"
    assert not (tmp_path / "runs").exists()
