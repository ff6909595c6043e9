"""The pieces on their own: the atomic file store, the asset cache, strict JSON, Host and Origin
checks, the per-run charge (live hyperparameters: test_hyperparams_units.py)."""

from __future__ import annotations

import io
import json
import math
import re
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from configs.files import atomic_write
from dashboard import strict_json
from dashboard.assets import PACKAGES, VendorAssets, _install, ensure_assets
from dashboard.guard import allowed_host_names, normalize_host_name, same_origin, split_host
from dashboard.labml_app_patches import AtomicFileDbDriver, AtomicFileIndexDbDriver
from dashboard.store import DataFolderInUseError, DataFolderLock, RecordFile
from dashboard.usage import RUN_BYTES, SERIES_BYTES, RunUsage, packet_charge
from dashboard.web import BadRequest, without_framing


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    atomic_write(target, b"old")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_file_drivers_round_trip(tmp_path: Path) -> None:
    from labml_db import Index, Model
    from labml_db.serializer.json import JsonSerializer
    from labml_db.serializer.pickle import PickleSerializer

    class Thing(Model["Thing"]):
        value: float

        @classmethod
        def defaults(cls) -> dict[str, Any]:
            return {"value": 0.0}

    class ThingIndex(Index["Thing"]):
        pass

    driver = AtomicFileDbDriver(PickleSerializer(), Thing, tmp_path / "models")
    index = AtomicFileIndexDbDriver(JsonSerializer(), ThingIndex, tmp_path / "indexes" / "ThingIndex.json")
    driver.save_dict("Thing:1", {"value": math.pi})
    assert driver.load_dict("Thing:1") == {"value": math.pi}
    assert driver.load_dict("Thing:2") is None
    index.set("a", "Thing:1")
    assert json.loads((tmp_path / "indexes" / "ThingIndex.json").read_text()) == {"a": "Thing:1"}
    driver.delete("Thing:1")
    driver.delete("Thing:1")  # already gone: not an error
    assert not list((tmp_path / "models").glob("*.tmp"))


def test_one_lock_holder_per_folder(tmp_path: Path) -> None:
    with DataFolderLock(tmp_path), pytest.raises(DataFolderInUseError, match="already used by another dashboard"):
        DataFolderLock(tmp_path).acquire()
    with DataFolderLock(tmp_path):  # released on exit
        pass


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_install_keeps_only_the_needed_files(tmp_path: Path) -> None:
    fontawesome = next(p for p in PACKAGES if p.name.endswith("fontawesome-free"))
    _install(fontawesome, _tarball({
        "package/css/all.css": b"css", "package/webfonts/fa.woff2": b"font", "package/js/all.js": b"js",
        "package/webfonts/../../../evil": b"x", "package/webfonts/sub/deep.woff2": b"x",
    }), tmp_path)
    folder = tmp_path / fontawesome.folder
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == \
        ["css/all.css", "webfonts/fa.woff2"]
    assert not (tmp_path.parent / "evil").exists()


def test_unreachable_registry_degrades_to_the_cdn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dashboard.assets.REGISTRY", "http://127.0.0.1:9")  # discard port: nothing listens
    assets = ensure_assets(tmp_path, timeout_s=5)
    assert assets.available == [] and len(assets.errors) == len(PACKAGES)
    html = '<script src="https://d3js.org/d3.v6.min.js"></script>'
    assert assets.rewrite_index(html) == html


def test_cached_packages_are_used_without_the_network(tmp_path: Path) -> None:
    d3 = PACKAGES[0]
    (tmp_path / d3.folder / "dist").mkdir(parents=True)
    (tmp_path / d3.folder / d3.local_path).write_text("// d3")
    assets = VendorAssets(tmp_path, [d3], [])
    assert assets.rewrite_index(f'<script src="{d3.cdn_url}"></script>') == \
        f'<script src="/_vendor/{d3.folder}/{d3.local_path}"></script>'


@pytest.mark.parametrize("raw, message", [
    (b'{"a": NaN}', "field a: NaN is not allowed"),
    (b'{"a": [1, Infinity]}', "field a[1]: Infinity is not allowed"),
    (b'{"a": {"b c": -1e309}}', 'field a["b c"]: -1e309 is out of range'),
    (b'{"a": "\\ud800x"}', "field a: '\\ud800x' has a lone surrogate at index 0"),
    (b'{"\\udc00": 1}', "the body: '\\udc00' has a lone surrogate"),
    (b'{"pid": -9223372036854775809}', "field pid: an integer of 19 digits is out of range"),
    (b'{"pid": 12345678901234567890}', "field pid: an integer of 20 digits is out of range"),
    (b"[" * 33 + b"]" * 33, "is nested deeper than 32 levels"),
    (b"[" * 5000 + b"]" * 5000, "the body is nested deeper than 32 levels"),
    (b"\xff", "the body is not UTF-8 (byte 0)"),
    (b"\xef\xbb\xbf{}", "malformed JSON body"),  # a BOM
    (b"", "malformed JSON body"),
])
def test_strict_json_refuses_what_the_store_cannot_hold(raw: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=re.escape(message)) as refused:
        strict_json.loads(raw)
    assert refused.value.status_code == 400


def test_strict_json_keeps_everything_else() -> None:
    raw = b'[{"a": [1.5, -2, 9223372036854775807, "\\ud83d\\ude00", null, true]}]'
    assert strict_json.loads(raw) == [{"a": [1.5, -2, 2 ** 63 - 1, "\U0001F600", None, True]}]
    assert strict_json.loads(b"[" * 32 + b"]" * 32) == eval("[" * 31 + "[]" + "]" * 31)


@pytest.mark.parametrize("header, expected", [
    ("127.0.0.1:5005", ("127.0.0.1", 5005)), ("LocalHost.", ("localhost", None)), ("[::1]:80", ("[::1]", 80)),
    ("[0:0::1]", ("[::1]", None)), ("Dash.Example.COM:443", ("dash.example.com", 443)),
    ("evil.example@127.0.0.1", None), ("127.0.0.1:x", None), ("127.0.0.1:5005/x", None), ("", None),
    ("a b", None), ("*", None), ("-bad.example", None),
])
def test_host_headers_are_split_and_normalized(header: str, expected: tuple[str, int | None] | None) -> None:
    assert split_host(header) == expected


def test_allowed_hosts_are_loopback_the_bound_address_and_extra_names() -> None:
    assert allowed_host_names("0.0.0.0") == {"127.0.0.1", "localhost", "[::1]"}
    assert allowed_host_names("192.168.1.5", ["Dash.Example."]) == {"127.0.0.1", "localhost", "[::1]", "192.168.1.5",
                                                                     "dash.example"}
    assert allowed_host_names("fe80::1") >= {"[fe80::1]"}
    with pytest.raises(ValueError):
        normalize_host_name("dash.example:80")


@pytest.mark.parametrize("origin, host, same", [
    ("http://127.0.0.1:5005", "127.0.0.1:5005", True),
    ("https://dash.example", "dash.example", True),  # a TLS proxy in front: the port is the default one
    ("https://dash.example", "dash.example:443", True),
    ("http://dash.example", "dash.example:8080", False),
    ("http://localhost:5005", "127.0.0.1:5005", False),  # another origin, even if it is the same machine
    ("http://127.0.0.1:5006", "127.0.0.1:5005", False),
    ("null", "127.0.0.1:5005", False),
    ("file://", "127.0.0.1:5005", False),
    ("http://127.0.0.1:5005/path", "127.0.0.1:5005", False),
])
def test_same_origin_compares_name_and_port(origin: str, host: str, same: bool) -> None:
    assert same_origin(origin, host) is same


def test_runs_are_charged_for_what_labml_app_keeps() -> None:
    packet = {"time": 1.0, "status": {"status": "x"}, "stdout": "abc",
              "track": {"loss": {"step": [1], "value": [1]}, "hp.lr": {"step": [1], "value": [1]}}}
    # Worked out by hand: '{"status": {"status": "x"}}' is 27 bytes, '{"stdout": "abc"}' 17 and its
    # log pages ceil(3 / 16) = 1; each new series 32 KiB and three copies of its name, hp.* too.
    text = 27 + 17 + 1
    assert packet_charge(packet, set()) == (text + SERIES_BYTES + 3 * 4 + SERIES_BYTES + 3 * 5, ["loss", "hp.lr"])
    assert packet_charge(packet, {"loss", "hp.lr"}) == (text, [])
    assert packet_charge({"track": {"loss": {"step": [2], "value": [0]}}, "time": 2.0}, {"loss"}) == (0, [])
    # A name is charged by its UTF-8 bytes; the computer three times, configs four.
    assert packet_charge({"track": {"é": {}}}, set()) == (SERIES_BYTES + 3 * 2, ["é"])
    assert packet_charge({"computer": "c"}, set()) == (3 * len('{"computer": "c"}'), [])
    assert packet_charge({"configs": {}}, set()) == (4 * len('{"configs": {}}'), [])
    assert packet_charge({"stdout": "y" * 33}, set()) == (len('{"stdout": ""}') + 33 + 3, [])


def test_run_usage_refuses_past_the_cap_and_persists(tmp_path: Path) -> None:
    # A new run: 8 KiB, series "a" 32 KiB + 3, '{"name": "n"}' 13 bytes.
    usage = RunUsage(tmp_path / "usage.json", max_run_bytes=RUN_BYTES + SERIES_BYTES + 3 + 26)
    charged, new = usage.charge("run", [{"track": {"a": {}}}, {"track": {"a": {}}, "name": "n"}])
    assert (charged, new) == (RUN_BYTES + SERIES_BYTES + 3 + len('{"name": "n"}'), ["a"])
    usage.check("run", charged)  # 13 bytes of room left
    usage.record("run", charged, new)
    stored = RUN_BYTES + SERIES_BYTES + 3 + 13
    with pytest.raises(BadRequest, match=f"has stored {stored} bytes and this request adds 14"):
        usage.check("run", len('{"name": "nn"}'))
    again = RunUsage(tmp_path / "usage.json")
    assert again.used("run") == stored and again.charge("run", [{"track": {"a": {}}}]) == (0, [])
    assert json.loads((tmp_path / "usage.json").read_text()) == {"run": {"bytes": stored, "series": ["a"]}}
    # Deleting on the dashboard (on its event loop): the share back at once, the file in a thread.
    again.forget("run", write_soon=True)
    assert again.used("run") == 0
    for thread in threading.enumerate():
        if thread.name == "write usage.json":
            thread.join()
    assert RunUsage(tmp_path / "usage.json").used("run") == 0 and (tmp_path / "usage.json").read_text() == "{}"


def test_a_record_file_is_written_whole_and_in_order(tmp_path: Path) -> None:
    # Writers that finish out of order never put an older state back: a write of a change that a
    # later write already holds is skipped, and each write holds every change staged before it.
    records = RecordFile(tmp_path / "r.json", "records")
    assert records.load() == {}
    first = records.stage("a", {"n": 1})
    second = records.stage("b", {"n": "é"})
    records.write(second)
    assert json.loads((tmp_path / "r.json").read_text("utf-8")) == {"a": {"n": 1}, "b": {"n": "é"}}
    records.stage("a", None)
    records.write(first)  # already written by the write of `second`: nothing changes
    assert json.loads((tmp_path / "r.json").read_text("utf-8")) == {"a": {"n": 1}, "b": {"n": "é"}}
    records.write(records.stage("c", [1]))
    assert json.loads((tmp_path / "r.json").read_text("utf-8")) == {"b": {"n": "é"}, "c": [1]}
    assert RecordFile(tmp_path / "r.json", "records").load() == {"b": {"n": "é"}, "c": [1]}


@pytest.mark.parametrize(("policy", "merged"), [
    ("", "frame-ancestors 'none'"),
    ("default-src 'self'", "default-src 'self'; frame-ancestors 'none'"),
    ("default-src 'self'; FRAME-ANCESTORS https://a.example ;img-src data:", "default-src 'self'; img-src data:; frame-ancestors 'none'"),
    ("frame-ancestors *;", "frame-ancestors 'none'"),
])
def test_an_answer_s_own_content_security_policy_keeps_its_directives_and_forbids_framing(policy: str, merged: str) -> None:
    assert without_framing(policy) == merged
