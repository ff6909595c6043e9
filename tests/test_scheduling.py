"""The suite's own xdist scheduling (tests/scheduling.py): units longest first, the cluster files as one."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import scheduling


class Worker:
    """What the scheduler sees of an xdist worker: the tests it is sent, and whether it was stopped."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_the_table_sums_each_files_setup_call_and_teardown_seconds() -> None:
    log = ["============ slowest durations ============",
           "12.50s call     tests/test_a.py::test_one[x-1]",
           "0.25s setup    tests/test_a.py::test_one[x-1]",
           "3.00s teardown tests/dashboard/test_b.py::Group::test_two",
           "1.04s call     tests/test_a.py::test_three",
           "(2 durations < 0.005s hidden.  Use -vv to show these durations.)",
           "2 passed in 17.00s"]
    assert scheduling.seconds_per_file(log) == {"tests/dashboard/test_b.py": 3.0, "tests/test_a.py": 13.8}


def test_units_go_longest_first_the_cluster_files_as_one_and_an_unmeasured_file_first(
        pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not pytestconfig.pluginmanager.hasplugin("xdist"):
        pytest.skip("xdist is not loaded (-p no:xdist): there is no scheduling to check")
    files = {"test_many.py": "def test_x(): pass\n",
             "test_cluster_a.py": "def test_y(local_cluster: object) -> None: pass\n",
             "test_cluster_b.py": "@pytest.mark.usefixtures('local_cluster')\ndef test_z(): pass\n",
             "test_mid.py": "def test_w(): 'not the `local_cluster`' \n",
             "test_new.py": "def test_v(): pass\n"}
    for name, text in files.items():
        (tmp_path / "tests").mkdir(exist_ok=True)
        (tmp_path / "tests" / name).write_text(text)
    table = tmp_path / "seconds.json"
    # many: 5 tests, 10 s; the cluster files 40 + 30 s as one unit; mid: 60 s; new: not measured.
    table.write_text(json.dumps({"tests/test_many.py": 10, "tests/test_cluster_a.py": 40,
                                 "tests/test_cluster_b.py": 30, "tests/test_mid.py": 60}))
    monkeypatch.setattr(scheduling, "TABLE", table)
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"])  # two workers, as `-n 2` would say
    sched = scheduling.LongestFirstScheduling(pytestconfig)
    sched.rootpath = tmp_path
    collection = [*(f"tests/test_many.py::test_{i}" for i in range(5)), "tests/test_cluster_a.py::test_y",
                  "tests/test_mid.py::test_w", "tests/test_cluster_b.py::test_z", "tests/test_new.py::test_v"]
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        sched.add_node(worker)
        sched.add_node_collection(worker, collection)
    sched.schedule()
    # Order: new (unmeasured), the cluster unit (70 s), mid (60 s), many (10 s); each worker is
    # given two units at the start.
    assert first.sent == [8, 6]  # new, then mid
    assert second.sent == [5, 7, *range(5)]  # cluster_a + cluster_b, then many (its 2 units' tests)
    assert list(sched.assigned_work[second]) == ["local_cluster", "tests/test_many.py"]
