"""Reading and writing files in a folder that is input, not only output: whoever may write the data
dir (a shared `--data-dir`, a copied run) may have put anything in it. A folder is checked whole
before a byte of it is read (`check_plain_folder` in experiments/run/folders.py); then
`open_own_file` opens a file to write without following a link, `open_to_read` one to read, and
`remove_dead_writers_files` removes the temp files a killed writer left.

labml opens `configs.yaml`, `run.yaml`, `indicators.yaml`, `source.diff`, `run_log.jsonl` and
`run.pid` with a plain `open(path, "w"/"a")`, which follows a symbolic link and writes into a hard
link's other names: a link there would let the run overwrite any file its user can write. The
files this project writes itself are replaced by rename (`configs.files.atomic_write`) or opened with
`open_own_file` (O_NOFOLLOW, a second name refused), so a link in their place is never written
through, even one put there after the check; reading through one would still show a file from
elsewhere, so every link is refused, wherever it is.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

# What a writer of this project leaves when it is killed mid-write, and nothing else: the temp
# file of `configs.files.atomic_write` (`.<name>.<8 characters of mkstemp>.tmp`), the staged newest
# checkpoint and the hard link of a rotation (`experiments.run.folders.rotate_in`).
DEAD_WRITERS_FILES = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp|\.checkpoint\.pt\.next|\.checkpoint\.\d+\.pt\.link")

class UnsafeRunFolder(ValueError):
    """A run folder that must not be read or written: the message names the path and what is wrong."""


def open_own_file(path: Path, flags: int) -> int:
    """A file this project writes in a folder that is input, opened (`os.open` `flags`, a write
    mode) without following a link, or `UnsafeRunFolder` before a byte is written: O_NOFOLLOW
    refuses a symbolic link in its place (ELOOP), O_NONBLOCK a FIFO nobody reads, and the opened
    file itself (not its name) must be a regular file with no other name: a hard link put in its
    place since the folder was checked would have the write change another file. Never pass
    O_TRUNC: that would empty such a file before the check (create it with O_EXCL instead)."""
    if flags & os.O_TRUNC:
        raise ValueError("open_own_file: O_TRUNC would empty the file before it is checked")
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)  # less the umask
    except OSError as e:
        raise UnsafeRunFolder(f"{path} cannot be opened without following a link ({e.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise UnsafeRunFolder(f"{path} is not a file of its own (a device, FIFO or socket, or a file with "
                              f"{info.st_nlink} hard links), and would be written through")
    os.set_blocking(fd, True)
    return fd


def open_to_read(path: Path) -> BinaryIO:
    """A file of a folder that is input, opened to read (binary) without following a link: O_NOFOLLOW
    refuses a symbolic link put in its place since the folder was checked (ELOOP), O_NONBLOCK a FIFO
    nobody writes, and the opened file must be a regular one; `UnsafeRunFolder` otherwise, and
    `FileNotFoundError` where there is none. Caps on what is read are the reader's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise UnsafeRunFolder(f"{path} cannot be opened without following a link ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeRunFolder(f"{path} is not a regular file (a device, FIFO or socket)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def remove_dead_writers_files(folder: Path) -> list[Path]:
    """Remove from `folder` (not below it) the temp files a writer killed mid-write left, as named
    by DEAD_WRITERS_FILES; call it only when no live process owns the run. Removing a name never
    follows a link (unlink removes the link itself). Returns what was removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
        for entry in entries:
            if DEAD_WRITERS_FILES.fullmatch(entry.name) and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed
