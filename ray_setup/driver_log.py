"""Ray's own messages to a driver joined to a cluster, kept in one file of the cluster's session
logs instead of the user's terminal, said once.

Two kinds reach a driver: the records of Ray's Python loggers (its advice and warnings: a runtime
env, the token) and the lines its C++ client writes to file descriptor 2 in its own format (a task
whose node was lost, a GCS gone). From `hold()` until `stop()`, the first are taken from the `ray`
logger's handlers, held until the session's log folder is known, then written to the file; from
`start()`, file descriptor 2 is a pipe whose lines in Ray's format go to the same file and every
other line to the real stderr. The first message kept is announced on stderr in one line; what the
driver says itself (a node lost, the cluster lost) it says on stderr as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from pathlib import Path

_CLIENT_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\] ")
_END = b"\0end of the driver's stderr\0\n"


class DriverRayLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))
        self.path: Path | None = None
        self.held: list[logging.LogRecord] = []
        self.said = threading.Event()
        self._logger_was: tuple[list[logging.Handler], bool] | None = None
        self._real_stderr: int | None = None
        self._pump: threading.Thread | None = None

    def hold(self) -> None:
        """Ray's Python records from here on are this handler's (held until `start`). After `import ray`."""
        logger = logging.getLogger("ray")
        self._logger_was = (list(logger.handlers), logger.propagate)
        logger.handlers, logger.propagate = [self], False

    def start(self, path: Path) -> None:
        """The file is known (the session's log folder): the held records go there, and so does every
        line of Ray's C++ client on file descriptor 2."""
        self.path = path
        for record in self.held:
            self._keep(self.format(record).encode() + b"\n")
        self.held.clear()
        sys.stderr.flush()
        self._real_stderr, (read, write) = os.dup(2), os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._pump = threading.Thread(target=self._pump_lines, args=(read,), name="ray-driver-log", daemon=True)
        self._pump.start()

    def stop(self) -> None:
        """File descriptor 2 put back once every line written before has been passed on, and the `ray`
        logger's own handlers."""
        if self._pump is not None and self._real_stderr is not None:
            sys.stderr.flush()
            os.write(2, _END)
            self._pump.join(timeout=10)
            os.dup2(self._real_stderr, 2)
            os.close(self._real_stderr)
            self._pump = self._real_stderr = None
        if self._logger_was is not None:
            logger = logging.getLogger("ray")
            logger.handlers, logger.propagate = self._logger_was
            self._logger_was = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.path is None:
            self.held.append(record)
        else:
            self._keep(self.format(record).encode() + b"\n")

    def _pump_lines(self, read: int) -> None:
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                if line == _END:
                    return
                if _CLIENT_LOG_LINE.match(line):
                    self._keep(line)
                elif self._real_stderr is not None:
                    os.write(self._real_stderr, line)

    def _keep(self, line: bytes) -> None:
        assert self.path is not None
        with contextlib.suppress(OSError), self.path.open("ab") as log:
            log.write(line)
        if not self.said.is_set():
            self.said.set()
            notice = f"ray: Ray's own messages to this driver are kept in {self.path}\n".encode()
            os.write(self._real_stderr if self._real_stderr is not None else 2, notice)
