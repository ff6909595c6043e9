"""A cluster's head, looked at from a thread: its loss is an event the driver reads between waits.

Left alone, Ray's client waits a minute for a lost GCS, then ends the driver's process with its own
account, before any line of ours could say how to go on. So a driver joined to a cluster looks at
the head every half second: gone when its GCS port refuses a connection, or the port of the head
node's raylet does. The raylet goes first: its tasks fail at once, while the GCS may still answer
for a moment (the node's processes are ended after it). A slow answer is a busy head, not a lost one.
Nothing is sent to the driver: it reads `lost` (or asks `refuses_now()` where Ray's errors came
before the watcher's next look), and ends its work as a lost head's result, never as a person's stop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

from ray_setup.loopback import gcs_target


def port_refuses(target: tuple[str, int]) -> bool:
    try:
        socket.create_connection(target, timeout=10).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


class HeadWatch:
    """The head of the cluster at `address` (a GCS address; a Ray Client address is not watched),
    with its raylet at `raylet` (host, port) where known."""

    def __init__(self, address: str, raylet: Sequence[tuple[str, int]] = (), period_s: float = 0.5) -> None:
        self.address = address
        self.period_s = period_s
        self.ports = [p for p in (gcs_target(address), *raylet) if p is not None]
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refuses_now(self) -> bool:
        """Whether the head is gone, looked at now (and `lost` set if it is)."""
        if not self.lost.is_set() and self.ports and any(port_refuses(p) for p in self.ports):
            self.lost.set()
        return self.lost.is_set()

    def start(self) -> HeadWatch:
        def watch() -> None:
            while not self._stop.wait(self.period_s) and not self.refuses_now():
                pass

        if gcs_target(self.address) is not None:
            self._thread = threading.Thread(target=watch, name="ray-head-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
