"""A run's evaluation videos, read from the trainer's runs folder (`--runs-dir`), for its run page.

The trainer films games into its run folder, ``data_dir/<name>/<uuid>/``: ``--eval-video-every``
writes ``videos/update_NNNNNN.mp4`` there, ``experiments.evaluate --video`` wherever it is told.
Started with ``--runs-dir DATA_DIR``, the dashboard reads them where they lie: nothing is copied,
and the only thing it adds to what it exposes is a read of MP4 files inside run folders.

- ``GET /api/v1/videos/<uuid>``: ``{"run_uuid", "video"}``, the run's newest MP4 (by modification
  time) as ``{"name", "url", "bytes", "modified"}``, or ``null`` while it has none.
- ``GET /api/v1/videos/<uuid>/<name>``: that video, ``video/mp4``, with HTTP Range requests
  (browsers fetch video in ranges; Starlette's `FileResponse` answers them). `name` is only looked
  up in the run's own listing, never joined onto a path, and the listing holds only regular files
  that resolve inside the run folder: no ``..``, no link out of it. Any of the run's videos is
  served, not just the newest, so a video being watched keeps its address when a newer one lands.

The run folder itself must resolve inside `runs_dir` (a link to elsewhere is ignored), and the
uuid must be labml's (32 hex digits) before any path is built from it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import FileResponse, Response
from starlette.routing import Route

from dashboard.web import BadRequest, json_endpoint

# What labml names a run folder: uuid1().hex.
RUN_FOLDER_RE = re.compile(r"^[0-9a-f]{32}$")
VIDEO_SUFFIX = ".mp4"
ROUTE = "/api/v1/videos"


@dataclass(frozen=True)
class Video:
    path: Path  # resolved, inside the run folder
    name: str  # relative to the run folder, "/"-separated: the address it is served under
    size: int
    modified_ns: int

    def to_json(self, run_uuid: str) -> dict[str, Any]:
        # The modification time in the address: a file rewritten under the same name is fetched anew.
        return {"name": self.name, "url": f"{ROUTE}/{run_uuid}/{self.name}?v={self.modified_ns}",
                "bytes": self.size, "modified": self.modified_ns / 1e9}


class RunVideos:
    """The MP4 files of each run under `runs_dir` (the trainer's data_dir); None: no videos."""

    def __init__(self, runs_dir: Path | None) -> None:
        self.runs_dir = runs_dir

    def run_folder(self, run_uuid: str) -> Path | None:
        """``runs_dir/<name>/<run_uuid>``, resolved, if there is one inside `runs_dir`."""
        if self.runs_dir is None or not RUN_FOLDER_RE.match(run_uuid):
            return None
        root = self.runs_dir.resolve()
        for candidate in sorted(root.glob(f"*/{run_uuid}")):
            folder = candidate.resolve()
            if folder.is_dir() and folder.is_relative_to(root):
                return folder
        return None

    def listing(self, run_uuid: str) -> list[Video]:
        """The run's videos, oldest first. Hidden files (a film still being written is
        ``.NAME.partial.mp4``) and anything that resolves outside the run folder are left out."""
        folder = self.run_folder(run_uuid)
        if folder is None:
            return []
        videos = []
        # os.walk does not descend into linked folders; a linked file is checked where it resolves.
        for parent, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for file_name in files:
                if file_name.startswith(".") or not file_name.lower().endswith(VIDEO_SUFFIX):
                    continue
                video = _video(folder, Path(parent) / file_name)
                if video is not None:
                    videos.append(video)
        return sorted(videos, key=lambda v: (v.modified_ns, v.name))

    def latest(self, run_uuid: str) -> Video | None:
        videos = self.listing(run_uuid)
        return videos[-1] if videos else None

    def find(self, run_uuid: str, name: str) -> Video | None:
        return next((v for v in self.listing(run_uuid) if v.name == name), None)


def _video(folder: Path, path: Path) -> Video | None:
    try:
        resolved = path.resolve(strict=True)
        stat = resolved.stat()
    except (OSError, RuntimeError):  # gone meanwhile, a link loop
        return None
    if not resolved.is_relative_to(folder) or not resolved.is_file():
        return None
    return Video(resolved, path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns)


def _check_run_uuid(run_uuid: str) -> None:
    if not RUN_FOLDER_RE.match(run_uuid):
        raise BadRequest(400, f"invalid run UUID {run_uuid[:80]!r}: expected 32 hexadecimal digits")


def video_routes(runs_dir: Path | None) -> list[Route]:
    """The two endpoints above, reading videos under `runs_dir` (None: answered with 404)."""
    videos = RunVideos(runs_dir)

    def check(run_uuid: str) -> None:
        _check_run_uuid(run_uuid)
        if runs_dir is None:
            raise BadRequest(404, "this dashboard shows no videos: start it with --runs-dir DATA_DIR "
                                  "(the trainer's --data-dir)")

    async def latest_video(request: Request, run_uuid: str) -> dict[str, Any]:
        check(run_uuid)
        # A folder walk: off the event loop, like any file access that may be slow.
        latest = await anyio.to_thread.run_sync(videos.latest, run_uuid)
        return {"run_uuid": run_uuid, "video": None if latest is None else latest.to_json(run_uuid)}

    async def video_file(request: Request, run_uuid: str, name: str) -> Response:
        check(run_uuid)
        video = await anyio.to_thread.run_sync(videos.find, run_uuid, name)
        if video is None:
            raise BadRequest(404, f"run {run_uuid} has no video {name[:200]!r}")
        return FileResponse(video.path, media_type="video/mp4", headers={"X-Content-Type-Options": "nosniff"})

    return [Route(f"{ROUTE}/{{run_uuid}}", json_endpoint(latest_video), methods=["GET"]),
            Route(f"{ROUTE}/{{run_uuid}}/{{name:path}}", json_endpoint(video_file), methods=["GET"])]
