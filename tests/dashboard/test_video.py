"""A run's evaluation video on its dashboard page (`experiments.dashboard --runs-dir DATA_DIR`).

The dashboard reads the videos where the trainer wrote them, `DATA_DIR/<name>/<uuid>/**.mp4`, and
serves only regular MP4 files reached inside a run folder without a link
(tests/dashboard/test_served_files.py races a link against it). The browser tests film a real
game during a real training run and play it in real Chromium: H.264 plays, OpenCV's old 'mp4v'
does not (MediaError 4), so they would catch a return to a codec browsers cannot decode.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from browser import CHROMIUM, Browser, Chromium
from dashboard_support import REPO, Dashboard, Process, run_tool
from http_support import assert_refused, send

PAGE_LIMIT_S = 120.0
MEDIA_ERR_SRC_NOT_SUPPORTED = 4  # HTMLMediaElement's MediaError code: "format not supported"
HAVE_CURRENT_DATA = 2  # readyState: the current frame is decoded, so the video can be shown
SECRET = b"SECRET-OUTSIDE-THE-RUNS-FOLDER"


def touch(path: Path, content: bytes, mtime: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, ns=(mtime, mtime))
    return path


@dataclass
class Runs:
    runs_dir: Path  # the dashboard's --runs-dir, the trainer's --data-dir
    good: str  # a run with two videos
    linked_run: str  # a run folder that is a link to a folder outside runs_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """A runs folder with hand-made run folders: a good run with two videos (the newer one is the
    latest), and everything that must not be served: links out of it, a hidden partial file, a
    run folder that is a link to elsewhere, a file beside the runs folder."""
    root = tmp_path_factory.mktemp("videos")
    runs_dir, outside = root / "runs", root / "outside"
    touch(outside / "secret.mp4", SECRET, 5_000)
    touch(outside / "run" / "videos" / "update_000001.mp4", SECRET, 5_000)
    good, linked_run = uuid.uuid1().hex, uuid.uuid1().hex
    run = runs_dir / "breakout" / good
    touch(run / "videos" / "update_000001.mp4", b"first video", 1_000)
    touch(run / "videos" / "update_000002.mp4", b"second video", 2_000)
    touch(run / "checkpoints" / "model.pt", b"not a video", 3_000)
    touch(run / "videos" / ".update_000003.partial.mp4", b"still being written", 4_000)
    (run / "videos" / "zz-link.mp4").symlink_to(outside / "secret.mp4")  # newer than both, but outside
    (run / "linked").symlink_to(outside, target_is_directory=True)
    (runs_dir / "breakout" / linked_run).symlink_to(outside / "run", target_is_directory=True)
    return Runs(runs_dir, good, linked_run)


@pytest.fixture(scope="module")
def video_dashboard(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    d = Dashboard(tmp_path_factory.mktemp("dashboard-data"), options=("--runs-dir", str(runs.runs_dir)))
    try:
        yield d.wait_ready()
    finally:
        d.kill()


def get(dashboard: Dashboard, path: str, headers: dict[str, str] | None = None) -> tuple[int, object]:
    return send(dashboard, "GET", path, headers=headers)


# -- the endpoints, over HTTP ------------------------------------------------------------------------

@pytest.mark.slow
def test_latest_video_is_the_newest_mp4_inside_the_run_folder(video_dashboard: Dashboard, runs: Runs) -> None:
    status, answer = get(video_dashboard, f"/api/v1/videos/{runs.good}")
    assert status == 200, answer
    assert answer == {"run_uuid": runs.good, "video": {
        "name": "videos/update_000002.mp4", "url": f"/api/v1/videos/{runs.good}/videos/update_000002.mp4?v=2000",
        "bytes": len(b"second video"), "modified": 2_000 / 1e9}}
    status, body = get(video_dashboard, answer["video"]["url"])
    assert (status, body) == (200, "second video")
    assert get(video_dashboard, f"/api/v1/videos/{runs.good}/videos/update_000001.mp4") == (200, "first video")


@pytest.mark.slow
def test_videos_are_served_as_mp4_in_ranges(video_dashboard: Dashboard, runs: Runs) -> None:
    # Browsers fetch video in ranges (seeking, and reading the index before the media).
    conn = http.client.HTTPConnection("127.0.0.1", video_dashboard.port, timeout=60)
    try:
        conn.request("GET", f"/api/v1/videos/{runs.good}/videos/update_000002.mp4", headers={"Range": "bytes=7-11"})
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 206
    assert body == b"video"  # bytes 7..11 of "second video"
    assert response.getheader("Content-Range") == f"bytes 7-11/{len(b'second video')}"
    assert response.getheader("Content-Type") == "video/mp4"
    assert response.getheader("Accept-Ranges") == "bytes"


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "../../../outside/secret.mp4",
    "videos/../../../../outside/secret.mp4",
    "..%2f..%2f..%2foutside%2fsecret.mp4",
    "%2e%2e/%2e%2e/%2e%2e/outside/secret.mp4",
    "videos/zz-link.mp4",  # a link to a file outside
    "linked/secret.mp4",  # a file inside a linked folder outside
    "linked/run/videos/update_000001.mp4",
    "videos/.update_000003.partial.mp4",  # a film still being written
    "checkpoints/model.pt",  # not a video
    "%2fetc%2fpasswd",
    "/etc/passwd",
])
def test_nothing_outside_a_run_folder_is_served(video_dashboard: Dashboard, runs: Runs, name: str) -> None:
    status, answer = get(video_dashboard, f"/api/v1/videos/{runs.good}/{name}")
    assert status == 404, (status, answer)
    assert_refused(answer, f"run {runs.good} has no video")
    assert SECRET.decode() not in json.dumps(answer)


@pytest.mark.slow
def test_a_run_folder_linked_to_elsewhere_has_no_videos(video_dashboard: Dashboard, runs: Runs) -> None:
    assert get(video_dashboard, f"/api/v1/videos/{runs.linked_run}") == (
        200, {"run_uuid": runs.linked_run, "video": None})
    status, _ = get(video_dashboard, f"/api/v1/videos/{runs.linked_run}/videos/update_000001.mp4")
    assert status == 404


@pytest.mark.slow
@pytest.mark.parametrize("run_uuid", ["..", "%2e%2e", "..%2f..%2foutside", "%2e%2e%2foutside", "not-a-uuid",
                                      "A" * 32, "0" * 31, "0" * 33, "*"])
def test_a_run_uuid_must_be_32_hex_digits(video_dashboard: Dashboard, run_uuid: str) -> None:
    for path in (f"/api/v1/videos/{run_uuid}", f"/api/v1/videos/{run_uuid}/secret.mp4"):
        status, answer = get(video_dashboard, path)
        # The server does not fold ".." segments away, so each of these reaches the check.
        assert status == 400, (path, status, answer)
        assert_refused(answer, "invalid run UUID", "32 hexadecimal digits")


@pytest.mark.slow
def test_an_unknown_run_has_no_video(video_dashboard: Dashboard) -> None:
    run_uuid = uuid.uuid1().hex
    assert get(video_dashboard, f"/api/v1/videos/{run_uuid}") == (200, {"run_uuid": run_uuid, "video": None})


@pytest.mark.slow
def test_foreign_host_names_get_no_video(video_dashboard: Dashboard, runs: Runs) -> None:
    status, answer = get(video_dashboard, f"/api/v1/videos/{runs.good}/videos/update_000002.mp4",
                         headers={"Host": "rebind.evil.example"})
    assert status == 421
    assert_refused(answer, "Host 'rebind.evil.example'")


@pytest.mark.slow
def test_a_runs_dir_created_after_the_start_is_read(tmp_path: Path, no_leftover_processes: None) -> None:
    # The usual order: the dashboard first, then the first training run creates the folder.
    runs_dir, run_uuid = tmp_path / "runs", uuid.uuid1().hex
    d = Dashboard(tmp_path / "data", options=("--runs-dir", str(runs_dir))).wait_ready()
    try:
        assert f"note: --runs-dir {runs_dir} does not exist yet" in d.output
        assert get(d, f"/api/v1/videos/{run_uuid}") == (200, {"run_uuid": run_uuid, "video": None})
        touch(runs_dir / "breakout" / run_uuid / "videos" / "update_000050.mp4", b"film", 7_000)
        status, answer = get(d, f"/api/v1/videos/{run_uuid}")
    finally:
        d.kill()
    assert status == 200 and answer["video"]["name"] == "videos/update_000050.mp4", answer


def test_runs_dir_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = run_tool("experiments.dashboard", "--runs-dir", str(tmp_path / "file"), "--data", str(tmp_path / "d"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"--runs-dir '{tmp_path / 'file'}': expected a readable folder" in result.stderr


# -- a real run's film in a real browser -------------------------------------------------------------

def _mp4v_file(path: Path) -> None:
    """What the project wrote before: OpenCV's 'mp4v' (MPEG-4 Part 2), which browsers do not decode."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), 15, (480, 660))
    for i in range(15):
        writer.write(np.full((660, 480, 3), 10 * i, np.uint8))
    writer.release()


@pytest.fixture(scope="module")
def filmed_run(video_dashboard: Dashboard, runs: Runs) -> str:
    """A real training run (2 updates) that films one game at update 2 into its run folder
    under the dashboard's --runs-dir, sending its metrics to that dashboard."""
    run = Process([sys.executable, "-m", "experiments.breakout", "--updates", "2", "--n-workers", "2",
                   "--worker-steps", "8", "--minibatches", "2", "--epochs", "1", "--eval-video-every", "2",
                   "--data-dir", str(runs.runs_dir), "--dashboard", video_dashboard.url], cwd=REPO)
    try:
        assert run.wait() == 0, run.output[-3000:]
    finally:
        run.kill()
    run_uuid = re.search(r"/run/([0-9a-f]{32})", run.output).group(1)
    assert (runs.runs_dir / "breakout" / run_uuid / "videos" / "update_000002.mp4").is_file()
    return run_uuid


def _play(browser: Browser, url: str) -> tuple[bool, list]:
    """Load `url` into a new <video>; (whether it settled, [readyState, error code, width, height])."""
    browser.evaluate(f"window.probe = document.createElement('video'); probe.muted = true; "
                     f"probe.src = {json.dumps(url)}; document.body.appendChild(probe); true")
    settled = browser.wait_until(f"probe.readyState >= {HAVE_CURRENT_DATA} || probe.error !== null", PAGE_LIMIT_S)
    return settled, browser.evaluate("[probe.readyState, probe.error && probe.error.code, probe.videoWidth,"
                                     " probe.videoHeight]")


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_run_page_plays_the_latest_video(video_dashboard: Dashboard, filmed_run: str, tmp_path: Path,
                                         no_leftover_processes: None, chromium: Chromium) -> None:
    player = "document.getElementById('dashboard-run-video-player')"
    with chromium.tab() as browser:
        browser.load(f"{video_dashboard.url}/run/{filmed_run}")
        settled = browser.wait_until(
            f"{player} !== null && ({player}.readyState >= {HAVE_CURRENT_DATA} || {player}.error !== null)"
            " && document.body.innerText.includes('breakout')", PAGE_LIMIT_S)
        state = browser.evaluate(f"[{player}.readyState, {player}.error && {player}.error.code,"
                                 f" {player}.videoWidth, {player}.videoHeight, {player}.currentSrc,"
                                 " document.getElementById('dashboard-run-video').innerText]")
        browser.screenshot(tmp_path / "run-page-video.png")
    assert settled, f"the run page's video never loaded: {state}"
    ready, error, width, height, source, title = state
    assert error is None and ready >= HAVE_CURRENT_DATA
    assert (width, height) == (160 * 3, 210 * 3 + 30)  # the screen ×3 and the text strip
    assert f"/api/v1/videos/{filmed_run}/videos/update_000002.mp4?v=" in source
    assert "update_000002.mp4" in title


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_browser_plays_h264_and_not_the_old_mp4v(video_dashboard: Dashboard, filmed_run: str, runs: Runs,
                                                 no_leftover_processes: None, chromium: Chromium) -> None:
    old_run = uuid.uuid1().hex
    old = runs.runs_dir / "old" / old_run / "old.mp4"
    old.parent.mkdir(parents=True)
    _mp4v_file(old)
    with chromium.tab() as browser:
        browser.load(f"{video_dashboard.url}/hyperparams/{filmed_run}")  # any page of the dashboard
        h264 = _play(browser, f"/api/v1/videos/{filmed_run}/videos/update_000002.mp4")
        browser.evaluate("probe.remove(); true")
        mp4v = _play(browser, f"/api/v1/videos/{old_run}/old.mp4")
    settled, (ready, error, width, height) = h264
    assert settled and error is None and ready >= HAVE_CURRENT_DATA and (width, height) == (480, 660), h264
    assert mp4v == (True, [0, MEDIA_ERR_SRC_NOT_SUPPORTED, 0, 0]), mp4v
