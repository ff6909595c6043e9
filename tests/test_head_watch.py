"""`head_refuses`, which every driver on a cluster asks to tell a lost head from a busy one, against
real sockets on this machine: a port that listens answers, one that nothing holds refuses.

The head's raylet goes before its GCS (tools/local_cluster.py ends the node's other processes once
its raylet has ended; a real head goes the same way when its raylet crashes): the runs on it fail at
once while the GCS still answers. tests/test_cluster_faults.py holds the GCS up through a whole
lost-head test; these check each port's part alone.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from game.vector import ray_cluster


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


def test_a_head_whose_gcs_refuses_is_lost(closed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_cluster, "_head_raylet", [])  # before the driver has looked at the cluster
    assert ray_cluster.head_refuses(f"127.0.0.1:{closed}") is True


def test_a_head_whose_raylet_refuses_is_lost_while_its_gcs_still_answers(
        listening: int, closed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_cluster, "_head_raylet", [("127.0.0.1", closed)])
    assert ray_cluster.head_refuses(f"127.0.0.1:{listening}") is True


def test_a_head_that_answers_on_both_ports_is_not_lost(listening: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_cluster, "_head_raylet", [("127.0.0.1", listening)])
    assert ray_cluster.head_refuses(f"127.0.0.1:{listening}") is False

