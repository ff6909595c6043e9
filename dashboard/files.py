"""Files the dashboard serves, opened once without following links and sent from what was opened.

Checking a path and then opening it sees two files when the path changes in between: a file
swapped for a link by an atomic rename was served from wherever the link pointed.  So every file
the dashboard serves (its static folders, the front-end libraries, run videos) is reached by a
walk from its root folder's descriptor, one name at a time, each opened with ``O_NOFOLLOW``: a
link anywhere below the root ends the walk.  The opened descriptor itself is then checked
(``fstat``: a regular file, and for run folders one with no second name) before a byte is sent,
and every byte comes from that descriptor (`OpenedFileResponse`), never from the name again.

The root is opened as given, links included: it is the dashboard's own configuration (its
package folders, ``--assets-cache``, ``--runs-dir``), not something a client names.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import formatdate
from mimetypes import guess_type
from pathlib import Path

import anyio.to_thread
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted where a file belongs is opened at once (and refused by fstat)
# instead of holding a worker thread until something writes to it.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def path_parts(rel: str) -> list[str] | None:
    """The names in a "/"-separated relative path, or None if it could leave its folder or is
    not a plain path (empty names, ".", "..", NUL)."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") or "\0" in part for part in parts):
        return None
    return parts


def open_folder(name: str, dir_fd: int | None = None) -> int | None:
    """A descriptor of the folder `name` (in `dir_fd`), or None if it is a link, not a folder, gone."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=dir_fd)
    except (OSError, ValueError):
        return None


@dataclass
class OpenedFile:
    fd: int
    stat: os.stat_result

    def close(self) -> None:
        os.close(self.fd)


def open_beneath(root_fd: int, parts: Sequence[str], *, single_name: bool = False) -> OpenedFile | None:
    """The regular file `parts` names below the folder `root_fd`, opened without following a link
    on the way; None if there is none.  `single_name`: also refuse a file with another hard link
    (a second name for a file that may lie anywhere)."""
    fds: list[int] = []
    try:
        folder = root_fd
        for name in parts[:-1]:
            fd = open_folder(name, folder)
            if fd is None:
                return None
            fds.append(fd)
            folder = fd
        try:
            fd = os.open(parts[-1], _FILE, dir_fd=folder)
        except (OSError, ValueError):
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (single_name and st.st_nlink != 1):
            os.close(fd)
            return None
        return OpenedFile(fd, st)
    finally:
        for fd in fds:
            os.close(fd)


def open_in_folder(root: Path, rel: str) -> OpenedFile | None:
    """The regular file `rel` inside `root`, opened as `open_beneath` does."""
    parts = path_parts(rel)
    root_fd = None if parts is None else open_folder(str(root))
    if parts is None or root_fd is None:
        return None
    try:
        return open_beneath(root_fd, parts)
    finally:
        os.close(root_fd)


class Unsatisfiable(ValueError):
    """A range that starts past the file's end (answered 416)."""


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range ``Range: bytes=...`` asks for, as (start, end exclusive); None to send the
    whole file (no header, one this server ignores: several ranges or a malformed one, as RFC
    9110 allows); `Unsatisfiable` for a range that starts past the end."""
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    first, sep, last = header[len("bytes="):].strip().partition("-")
    if not sep or not (first.isdigit() or first == "") or not (last.isdigit() or last == ""):
        return None
    if first == "":
        if last == "":
            return None
        suffix = int(last)  # the last `suffix` bytes
        if suffix == 0 or size == 0:
            raise Unsatisfiable
        return max(size - suffix, 0), size
    start = int(first)
    end = size if last == "" else min(int(last) + 1, size)
    if start >= size:
        raise Unsatisfiable
    return None if end <= start else (start, end)


class OpenedFileResponse(Response):
    """A file sent from its open descriptor (closed once the answer is sent), with one byte range
    when the request asks for one (browsers fetch video so); `HEAD` gets the headers alone."""

    chunk_size = 256 * 1024

    def __init__(self, opened: OpenedFile, media_type: str | None = None, name: str = "",
                 headers: dict[str, str] | None = None) -> None:
        self.opened = opened
        self.status_code = 200
        self.media_type = media_type or guess_type(name)[0] or "application/octet-stream"
        self.background = None
        self.init_headers(headers)
        st = opened.stat
        self.headers.setdefault("accept-ranges", "bytes")
        self.headers.setdefault("last-modified", formatdate(st.st_mtime, usegmt=True))
        tag = hashlib.md5(f"{st.st_mtime_ns}-{st.st_size}-{st.st_ino}".encode(), usedforsecurity=False)
        self.headers.setdefault("etag", f'"{tag.hexdigest()}"')

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._send(scope, send)
        finally:
            with contextlib.suppress(OSError):
                self.opened.close()

    async def _send(self, scope: Scope, send: Send) -> None:
        size = self.opened.stat.st_size
        request = Headers(scope=scope)
        if_range = request.get("if-range")
        headers = MutableHeaders(raw=list(self.raw_headers))
        try:
            # An If-Range naming another version of the file asks for all of it.
            wanted = None if if_range not in (None, self.headers["etag"], self.headers["last-modified"]) \
                else byte_range(request.get("range"), size)
        except Unsatisfiable:
            headers["content-range"] = f"bytes */{size}"
            headers["content-length"] = "0"
            await send({"type": "http.response.start", "status": 416, "headers": headers.raw})
            await send({"type": "http.response.body", "body": b""})
            return
        start, end = (0, size) if wanted is None else wanted
        headers["content-length"] = str(end - start)
        if wanted is not None:
            headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
        await send({"type": "http.response.start", "status": 200 if wanted is None else 206, "headers": headers.raw})
        if scope.get("method") == "HEAD":
            await send({"type": "http.response.body", "body": b""})
            return
        while True:
            # Reads of a local file are blocking calls: off the event loop.
            chunk = await anyio.to_thread.run_sync(os.pread, self.opened.fd, min(self.chunk_size, end - start), start)
            if start < end and not chunk:
                # Truncated since it was opened: end the answer short (the client sees an error),
                # never send other bytes in its place.
                raise RuntimeError("a served file shrank while it was sent")
            start += len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": start < end})
            if start >= end:
                return
