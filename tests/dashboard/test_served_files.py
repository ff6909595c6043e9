"""Issue 50, item 2: every file the dashboard serves is opened once, without following links, and
sent from what was opened; against a real dashboard, with real links swapped in by real renames.

The hole: the video route checked a video's path, then opened the path again and followed a link
put there meanwhile; a run's ``videos/a.mp4`` flipped between a real file and a link to a file
outside by atomic renames gave the outside file in 81 of 600 GETs.
"""

from __future__ import annotations

import http.client
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_support import Dashboard
from http_support import assert_refused, send

from dashboard.files import Unsatisfiable, byte_range, path_parts

REAL = b"REAL-FILM-" * 100  # what the run folder's video holds
SECRET = b"SECRET-OUTSIDE-THE-RUN-FOLDER"
GETS = 400  # requests during the flipping; a bound, not a duration


def get_bytes(dashboard: Dashboard, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", dashboard.port, timeout=60)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class Flipper(threading.Thread):
    """Swaps `target` between a regular file holding REAL and a link to `outside`, each by an
    atomic rename over it, until stopped."""

    def __init__(self, target: Path, outside: Path) -> None:
        super().__init__(daemon=True)
        self.target, self.outside = target, outside
        self.stop = threading.Event()
        self.flips = 0

    def run(self) -> None:
        staged = self.target.with_name(".staged")
        while not self.stop.is_set():
            staged.write_bytes(REAL)
            os.replace(staged, self.target)
            staged.symlink_to(self.outside)
            os.replace(staged, self.target)
            self.flips += 2


@pytest.fixture
def flipping(tmp_path: Path, no_leftover_processes: None) -> Iterator[tuple[Dashboard, dict[str, Flipper]]]:
    """A dashboard reading a runs folder and a library cache, and a flipper for a file of each,
    by the address that serves it (not started)."""
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(SECRET)
    run_uuid = uuid.uuid1().hex
    video = tmp_path / "runs" / "breakout" / run_uuid / "videos" / "a.mp4"
    cache = tmp_path / "cache"
    library = cache / "d3-6.7.0" / "dist" / "d3.min.js"
    for path in (video, library, cache / "bootstrap-5.0.0-beta2" / "dist" / "css" / "bootstrap.min.css",
                 cache / "fontawesome-free-5.9.0" / "css" / "all.css"):
        path.parent.mkdir(parents=True)
        path.write_bytes(REAL)
    dashboard = Dashboard(tmp_path / "data", options=("--runs-dir", str(tmp_path / "runs"), "--assets-cache", str(cache)))
    flippers = {f"/api/v1/videos/{run_uuid}/videos/a.mp4": Flipper(video, outside),
                "/_vendor/d3-6.7.0/dist/d3.min.js": Flipper(library, outside)}
    try:
        yield dashboard.wait_ready(), flippers
    finally:
        for flipper in flippers.values():
            flipper.stop.set()
            if flipper.is_alive():
                flipper.join()
        dashboard.kill()


@pytest.mark.slow
def test_a_served_file_flipped_to_a_link_never_serves_the_outside_file(
        flipping: tuple[Dashboard, dict[str, Flipper]]) -> None:
    dashboard, flippers = flipping
    for path, flipper in flippers.items():
        flipper.start()
        answers: dict[int, int] = {}
        for i in range(GETS):
            # Every other request in a range, as browsers fetch video.
            ranged = i % 2 == 1
            status, body = get_bytes(dashboard, path, {"Range": "bytes=10-59"} if ranged else None)
            answers[status] = answers.get(status, 0) + 1
            assert SECRET not in body, (path, i, status)
            if status in (200, 206):
                assert (status, body) == ((206, REAL[10:60]) if ranged else (200, REAL)), (path, i, status, body[:80])
            else:
                # The name is a link: a clean refusal, naming nothing of the target.
                assert status == 404, (path, i, status, body[:200])
                assert b"outside" not in body, (path, body)
        flipper.stop.set()
        flipper.join()
        assert flipper.flips > 0 and set(answers) <= {200, 206, 404}, (path, answers)
        # Settled on the link: refused; back to a real file: served.
        assert get_bytes(dashboard, path)[0] == 404
        flipper.target.unlink()
        flipper.target.write_bytes(REAL)
        assert get_bytes(dashboard, path) == (200, REAL)


@pytest.mark.slow
def test_a_video_with_a_second_hard_link_or_a_fifo_is_not_served(tmp_path: Path, no_leftover_processes: None) -> None:
    # A hard link is a second name for a file that may lie anywhere on the filesystem; a FIFO would
    # hold the reader until something writes to it.
    runs_dir, run_uuid = tmp_path / "runs", uuid.uuid1().hex
    videos = runs_dir / "breakout" / run_uuid / "videos"
    videos.mkdir(parents=True)
    (tmp_path / "outside.mp4").write_bytes(SECRET)
    os.link(tmp_path / "outside.mp4", videos / "hard.mp4")
    os.mkfifo(videos / "fifo.mp4")
    (videos / "good.mp4").write_bytes(REAL)
    dashboard = Dashboard(tmp_path / "data", options=("--runs-dir", str(runs_dir)))
    try:
        dashboard.wait_ready()
        status, answer = send(dashboard, "GET", f"/api/v1/videos/{run_uuid}")
        assert status == 200 and answer["video"]["name"] == "videos/good.mp4", answer
        for name in ("hard.mp4", "fifo.mp4"):
            status, answer = send(dashboard, "GET", f"/api/v1/videos/{run_uuid}/videos/{name}")
            assert status == 404, (name, status, answer)
            assert_refused(answer, f"run {run_uuid} has no video 'videos/{name}'")
        assert get_bytes(dashboard, f"/api/v1/videos/{run_uuid}/videos/good.mp4") == (200, REAL)
    finally:
        dashboard.kill()


@pytest.mark.slow
def test_a_front_end_library_that_is_a_link_is_not_served(tmp_path: Path, no_leftover_processes: None) -> None:
    # The library cache (--assets-cache) is a folder like any other: a file there replaced by a
    # link to elsewhere is not followed. Both files are present, so nothing is downloaded.
    cache, secret = tmp_path / "cache", tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    d3 = cache / "d3-6.7.0" / "dist" / "d3.min.js"
    d3.parent.mkdir(parents=True)
    d3.symlink_to(secret)
    css = cache / "bootstrap-5.0.0-beta2" / "dist" / "css" / "bootstrap.min.css"
    css.parent.mkdir(parents=True)
    css.write_bytes(b"body{}")
    (cache / "fontawesome-free-5.9.0" / "css").mkdir(parents=True)
    (cache / "fontawesome-free-5.9.0" / "css" / "all.css").write_bytes(b"i{}")
    (cache / "fontawesome-free-5.9.0" / "webfonts").symlink_to(tmp_path, target_is_directory=True)
    dashboard = Dashboard(tmp_path / "data", options=("--assets-cache", str(cache)))
    try:
        dashboard.wait_ready()
        for path in ("/_vendor/d3-6.7.0/dist/d3.min.js", "/_vendor/fontawesome-free-5.9.0/webfonts/secret.txt"):
            status, body = get_bytes(dashboard, path)
            assert status == 404 and SECRET not in body, (path, status, body)
        status, body = get_bytes(dashboard, "/_vendor/bootstrap-5.0.0-beta2/dist/css/bootstrap.min.css",
                                 {"Range": "bytes=-2"})
        assert (status, body) == (206, b"{}")
        assert get_bytes(dashboard, "/_vendor/bootstrap-5.0.0-beta2/dist/css/bootstrap.min.css",
                         {"Range": "bytes=6-"})[0] == 416
    finally:
        dashboard.kill()


@pytest.mark.parametrize(("header", "expected"), [
    (None, None),
    ("bytes=0-9", (0, 10)),
    ("bytes=10-", (10, 100)),
    ("bytes=90-1000", (90, 100)),  # an end past the file is the file's end
    ("bytes=-30", (70, 100)),  # the last 30 bytes
    ("bytes=-1000", (0, 100)),
    ("bytes=0-9,20-29", None),  # several ranges: the whole file, as RFC 9110 allows
    ("bytes=9-0", None),  # malformed: ignored
    ("bytes=a-b", None),
    ("items=0-9", None),
    ("bytes=100-", "unsatisfiable"),
    ("bytes=-0", "unsatisfiable"),
])
def test_byte_ranges(header: str | None, expected: object) -> None:
    if expected == "unsatisfiable":
        with pytest.raises(Unsatisfiable):
            byte_range(header, 100)
    else:
        assert byte_range(header, 100) == expected


def test_paths_that_could_leave_their_folder_are_not_walked() -> None:
    assert path_parts("videos/a.mp4") == ["videos", "a.mp4"]
    for rel in ("", "/etc/passwd", "videos//a.mp4", "videos/../a.mp4", "./a.mp4", "a.mp4/", "a\0.mp4"):
        assert path_parts(rel) is None, rel
