"""A run's evaluation videos, read from the trainer's runs folder (`--runs-dir`), for its run page.

The trainer films games into its run folder, ``data_dir/<name>/<uuid>/``: ``--eval-video-every``
writes ``videos/update_NNNNNN.mp4`` there, and ``experiments.evaluate --video NAME.mp4`` writes a
bare file name there too (a path with a folder goes where it says, shown here only inside a run folder).
Started with ``--runs-dir DATA_DIR``, the dashboard reads them where they lie: nothing is copied,
and the only thing it adds to what it exposes is a read of MP4 files inside run folders.

- ``GET /api/v1/videos/<uuid>``: ``{"run_uuid", "video"}``, the run's newest MP4 (by modification
  time) as ``{"name", "url", "bytes", "modified"}``, or ``null`` while it has none.
- ``GET /api/v1/videos/<uuid>/<name>``: that video, ``video/mp4``, with HTTP Range requests
  (browsers fetch video in ranges). `name` is a "/"-separated path inside the run folder, opened
  once as `files.open_beneath` does: no ``..``, no hidden name, no link on the way or at the end,
  only a regular ``.mp4`` file with no second hard link, checked on the opened file and sent from
  it (a file swapped for a link between a check and an open cannot be served).  Any of the run's
  videos is served, not just the newest, so a video being watched keeps its address when a newer
  one lands.

The run folder is ``runs_dir/<name>/<uuid>``, reached the same way: a run folder that is a link
is ignored.  The uuid must be labml's (32 hex digits) before any name is built from it.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import Response
from starlette.routing import Route

from dashboard.files import OpenedFile, OpenedFileResponse, open_beneath, open_folder, path_parts
from dashboard.web import BadRequest, json_endpoint

# What labml names a run folder: uuid1().hex.
RUN_FOLDER_RE = re.compile(r"^[0-9a-f]{32}$")
VIDEO_SUFFIX = ".mp4"
ROUTE = "/api/v1/videos"


@dataclass(frozen=True)
class Video:
    name: str  # relative to the run folder, "/"-separated: the address it is served under
    size: int
    modified_ns: int

    def to_json(self, run_uuid: str) -> dict[str, Any]:
        # The modification time in the address: a file rewritten under the same name is fetched anew.
        return {"name": self.name, "url": f"{ROUTE}/{run_uuid}/{self.name}?v={self.modified_ns}",
                "bytes": self.size, "modified": self.modified_ns / 1e9}


def is_video_name(parts: list[str]) -> bool:
    """A film's path, as the trainer writes them: no hidden name on the way (a film still being
    written is ``.NAME.partial.mp4``), an ``.mp4`` at the end."""
    return not any(part.startswith(".") for part in parts) and parts[-1].lower().endswith(VIDEO_SUFFIX)


def is_video_file(st: os.stat_result) -> bool:
    # A second hard link is a second name for a file that may lie outside the run folder.
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


class RunVideos:
    """The MP4 files of each run under `runs_dir` (the trainer's data_dir); None: no videos."""

    def __init__(self, runs_dir: Path | None) -> None:
        self.runs_dir = runs_dir

    def run_folder(self, run_uuid: str) -> int | None:
        """A descriptor of ``runs_dir/<name>/<run_uuid>``, reached without following a link."""
        if self.runs_dir is None or not RUN_FOLDER_RE.match(run_uuid):
            return None
        root = open_folder(str(self.runs_dir))
        if root is None:
            return None
        try:
            for name in sorted(os.listdir(root)):
                experiment = None if name.startswith(".") else open_folder(name, root)
                if experiment is None:
                    continue
                try:
                    folder = open_folder(run_uuid, experiment)
                finally:
                    os.close(experiment)
                if folder is not None:
                    return folder
            return None
        finally:
            os.close(root)

    def listing(self, run_uuid: str) -> list[Video]:
        """The run's videos, oldest first: what `open` would serve."""
        folder = self.run_folder(run_uuid)
        if folder is None:
            return []
        videos = []
        try:
            # fwalk descends through descriptors and never into a linked folder; files are
            # looked at without following links.
            for parent, dirs, files, parent_fd in os.fwalk(".", dir_fd=folder):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for file_name in files:
                    name = os.path.normpath(os.path.join(parent, file_name))
                    if not is_video_name(name.split("/")):
                        continue
                    try:
                        st = os.stat(file_name, dir_fd=parent_fd, follow_symlinks=False)
                    except OSError:  # gone meanwhile
                        continue
                    if is_video_file(st):
                        videos.append(Video(name, st.st_size, st.st_mtime_ns))
        finally:
            os.close(folder)
        return sorted(videos, key=lambda v: (v.modified_ns, v.name))

    def latest(self, run_uuid: str) -> Video | None:
        videos = self.listing(run_uuid)
        return videos[-1] if videos else None

    def open(self, run_uuid: str, name: str) -> OpenedFile | None:
        """The video `name` of the run, opened once (see the module's docstring); None if none."""
        parts = path_parts(name)
        if parts is None or not is_video_name(parts):
            return None
        folder = self.run_folder(run_uuid)
        if folder is None:
            return None
        try:
            opened = open_beneath(folder, parts, single_name=True)
        finally:
            os.close(folder)
        return opened


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
        opened = await anyio.to_thread.run_sync(videos.open, run_uuid, name)
        if opened is None:
            raise BadRequest(404, f"run {run_uuid} has no video {name[:200]!r}")
        return OpenedFileResponse(opened, "video/mp4", headers={"X-Content-Type-Options": "nosniff"})

    return [Route(f"{ROUTE}/{{run_uuid}}", json_endpoint(latest_video), methods=["GET"]),
            Route(f"{ROUTE}/{{run_uuid}}/{{name:path}}", json_endpoint(video_file), methods=["GET"])]
