"""Issue 39, item 8: the dashboard's store is read as data, never as code.

labml-app keeps its models as pickles under --data; a crafted `models/Run:<key>.pkl` whose
`__reduce__` creates a marker file ran on the next GET of the run.  Here real crafted files are
written into a real dashboard's store: no request, and no restart, creates the marker; each
answer is a clean JSON error or the record is skipped; the server keeps answering.
"""

from __future__ import annotations

import json
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dashboard_support import Dashboard
from http_support import new_uuid, run_uuids, send_json, track_path

from dashboard import labml_app_patches, safe_pickle


class Gadget:
    """Pickles as "call `func(*args)`": what an attacker writes into the store."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def gadgets(marker: Path) -> list[Any]:
    """Records whose loading by plain `pickle` creates `marker`, each another way."""
    return [
        Gadget(open, str(marker), "w"),  # the record itself
        {"run_uuid": "x", "name": "x", "tags": [Gadget(os.system, f"touch {marker}")]},  # deep inside a real-looking one
        {"configs": {"a": Gadget(eval, f"open({str(marker)!r}, 'w')")}},
    ]


def test_plain_pickle_runs_the_gadgets_the_store_refuses(tmp_path: Path) -> None:
    # The crafted records are real attacks: plain pickle runs each.
    for i, record in enumerate(gadgets(tmp_path / "marker")):
        pickle.loads(pickle.dumps(record))
        assert (tmp_path / "marker").exists(), i
        (tmp_path / "marker").unlink()
        with pytest.raises(safe_pickle.UnsafeRecord):
            safe_pickle.loads(pickle.dumps(record))
        assert not (tmp_path / "marker").exists(), i


def test_what_labml_app_stores_loads_unchanged() -> None:
    from labml_db import Key

    record = {"indicators": {"loss"}, "step": 11.0, "tokens": {"local": float("inf")}, "key": Key("Run:abc"),
              "tracking": {"loss": {"step": np.arange(3.0), "value": np.array([1.0, 0.5, 0.25], dtype=np.float32),
                                    "mean": np.float64(0.58)}}, "frozen": frozenset({1, 2}), "t": (1, "a", None)}
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert repr(safe_pickle.loads(pickle.dumps(record, protocol=protocol))) == repr(record), protocol
    for bad in (np.array(["text"]), np.array([None, 1], dtype=object), b"not a pickle", pickle.dumps(record)[:-5]):
        with pytest.raises(safe_pickle.UnsafeRecord):
            safe_pickle.loads(bad if isinstance(bad, bytes) else pickle.dumps(bad))
    # Keys that hold more than a name, or a name that is not text, or none.
    for contents in ({"_key": "Run:abc", "more": 1}, {"_key": b"Run:abc"}, {"_key": 7}, {"_key": ["Run:abc"]}, {}):
        key = Key("Run:abc")
        vars(key).clear()
        vars(key).update(contents)
        with pytest.raises(safe_pickle.UnsafeRecord, match="a key with other contents than its name"):
            safe_pickle.loads(pickle.dumps({"key": key}))


def run_file(data_dir: Path, run_uuid: str) -> Path:
    index = json.loads((data_dir / "store" / "indexes" / "RunIndex.json").read_text())
    key = index[run_uuid]
    return data_dir / "store" / "models" / f"{key}.pkl"


def test_a_crafted_store_file_runs_nothing(tmp_path: Path, no_leftover_processes: None) -> None:
    data, marker = tmp_path / "data", tmp_path / "marker"
    dashboard = Dashboard(data)
    victim, other = new_uuid(), new_uuid()
    try:
        dashboard.wait_ready()
        # Both at once: the dashboard holds each /track a while (its throttle), and neither needs the other.
        with ThreadPoolExecutor(2) as pool:
            created = pool.map(lambda run_name: send_json(dashboard, "POST", track_path(run_name[0]), {"name": run_name[1]})[0],
                               ((victim, "victim"), (other, "other")))
            assert list(created) == [200, 200]
        path = run_file(data, victim)
        assert path.exists()
        for record in gadgets(marker):
            path.write_bytes(pickle.dumps(record))
            status, answer = dashboard.request("GET", f"/api/v1/run/{victim}")
            # The record is skipped: the run is unknown.
            assert status == 404 and answer == {"error": f"unknown run {victim}"}, (status, answer)
            assert run_uuids(dashboard) == [other]
            assert dashboard.request("GET", f"/api/v1/run/{other}")[1]["name"] == "other"
            assert not marker.exists()
        warnings = [line for line in dashboard.lines if "is not plain data" in line]
        assert len(warnings) == 1 and str(path) in warnings[0], dashboard.output  # once a minute at most
        assert "Traceback" not in dashboard.output
        assert dashboard.terminate() == 0
    finally:
        dashboard.kill()

    # Every record of the store crafted: a restarted dashboard runs none of them and still answers.
    models = sorted((data / "store" / "models").glob("*.pkl"))
    assert len(models) > 5
    for i, path in enumerate(models):
        path.write_bytes(pickle.dumps(gadgets(marker)[i % 3]))
    restarted = Dashboard(data)
    try:
        restarted.wait_ready()
        assert restarted.request("GET", f"/api/v1/run/{other}")[0] == 404
        assert restarted.request("GET", "/api/v1/runs/null")[0] in (200, 500)
        assert send_json(restarted, "POST", track_path(new_uuid()), {"name": "after"})[0] in (200, 500)
        assert restarted.proc.poll() is None and not marker.exists()
        assert restarted.output.count("Traceback") <= 1, restarted.output  # once a minute at most
    finally:
        restarted.kill()


def test_records_from_mongodb_are_read_as_data_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With --mongo, labml-app's own driver unpickles each record; the dashboard makes it read as the file store does.
    monkeypatch.setenv("LABML_APP_SERVER_IP", "127.0.0.1")  # labml_app.settings reads these at import
    monkeypatch.setenv("LABML_APP_SERVER_PORT", "5005")
    from labml_app import db

    # The stock staticmethod comes back after the test.
    monkeypatch.setattr(db.MongoPickleDbDriver, "_from_dump", db.MongoPickleDbDriver.__dict__["_from_dump"])
    labml_app_patches.read_mongo_records_as_data()
    marker = tmp_path / "marker"
    for record in gadgets(marker):
        assert db.MongoPickleDbDriver._from_dump({"data": pickle.dumps(record)}) is None
        assert not marker.exists()
    assert db.MongoPickleDbDriver._from_dump({"data": pickle.dumps({"runs": {"a", "b"}})}) == {"runs": {"a", "b"}}
