"""The dashboard's own store files (`RecordFile`), each replaced whole, and the data folder's lock.

labml-app's models are kept in the same folder by labml_db's file drivers, made to replace
their files whole too (`labml_app_patches.use_file_store`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from configs.files import atomic_write

LOCK_FILE_NAME = "dashboard.lock"


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object a small store file of the dashboard's holds; {} before its first write.
    `ValueError` naming the file when it holds anything else."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not {what}")
    return data


class RecordFile:
    """One JSON object of records by key (a run's live values, a run's usage), in one file that is
    replaced whole on each change, without holding up the event loop or the records' readers.

    The owner changes a record under its own lock and `stage`s it there: only that record is
    encoded, so readers wait for one run's record, never for the whole file.  `write`, called once
    the owner's lock is released (and, from a request, in a worker thread), joins the staged
    records and writes them with `atomic_write`: one write at a time, each of the newest staged
    state, and a write whose change another has already written is skipped, so the file only
    moves forward and is always whole.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._encoded: dict[str, str] = {}
        self._staged = self._written = 0
        self._state_lock = threading.Lock()  # the encoded records and the staged count
        self._write_lock = threading.Lock()  # one write at a time, in order

    def load(self) -> dict[str, Any]:
        records = read_json_object(self.path, self.what)
        self._encoded = {key: _encode(record) for key, record in records.items()}
        return records

    def stage(self, key: str, record: object) -> int:
        """Take `record` (None: remove it) as the key's content from now on; returns the change's
        number, for `write`."""
        encoded = None if record is None else _encode(record)
        with self._state_lock:
            if encoded is None:
                self._encoded.pop(key, None)
            else:
                self._encoded[key] = encoded
            self._staged += 1
            return self._staged

    def write(self, change: int, *, soon: bool = False) -> None:
        """Make the file hold change number `change` (or a later one); `soon`: in a thread of its
        own, for a caller on the event loop (not a daemon thread: the process waits for it)."""
        if soon:
            threading.Thread(target=self.write, args=(change,), name=f"write {self.path.name}").start()
            return
        with self._write_lock:
            if self._written >= change:
                return
            with self._state_lock:
                newest, items = self._staged, sorted(self._encoded.items())
            body = "{" + ",".join(f"{json.dumps(key, ensure_ascii=False)}:{record}" for key, record in items) + "}"
            atomic_write(self.path, body.encode("utf-8"))
            self._written = newest


def _encode(record: object) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class DataFolderError(RuntimeError):
    """The data folder cannot be locked for this process; the message says why."""


class DataFolderInUseError(DataFolderError):
    """Another dashboard process holds the data folder's lock."""


class DataFolderLock:
    """An exclusive, non-blocking `flock` on `<data>/dashboard.lock`.

    The kernel drops the lock when the process dies, so a crash never leaves the
    folder locked; the pid written into the file only serves the error message.
    The file is opened without following a link and must have no other name, so
    the pid is never written through a link or hard link planted in its place.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise DataFolderError(f"{self.path.parent}: its {LOCK_FILE_NAME} is a symbolic link, which the "
                                  f"lock would write through; remove it") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise DataFolderError(f"{self.path.parent}: its {LOCK_FILE_NAME} is not a file of its own (a device, "
                                  f"FIFO or socket, or a file with {info.st_nlink} hard links), which the lock "
                                  f"would write through; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataFolderInUseError(
                    f"{self.path.parent} is already used by another dashboard (pid {holder}); "
                    f"stop it or choose another --data folder") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> DataFolderLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

