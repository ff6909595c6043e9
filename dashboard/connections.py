"""What one client may hold of the server: a deadline per request, a bound on connections, quiet logs.

uvicorn's HTTP/1.1 protocol waits for a request's headers and body for as long as the client
keeps the connection open, so a client sending a byte every few seconds (slowloris) holds a
connection, and a file descriptor, forever; enough of them exhaust the process's descriptors
and every other request fails.  `guarded_protocol` gives uvicorn a protocol that:
- gives each request `request_timeout_s` in all, from its first byte (or from the connection's
  opening) until its whole body is in; a request still arriving then is dropped (the deadline
  is total, not per byte, so trickling does not extend it).  Answering takes as long as it
  takes: the deadline stops once the request is read;
- gives a client that stops reading its answer (the server's send buffer full) as long again,
  then drops the connection (slow reading holds a descriptor just as slow sending does);
- keeps at most `max_connections` open.  At the bound a new connection makes room by closing
  the oldest one still sending its request (legitimate clients send theirs at once, so those
  are the stalled ones); when every open connection is being answered the new one gets a 503
  and is closed.  Either way the descriptor is released at once.
What is refused or dropped is logged through `OncePer`: one line, at most once a minute, so a
flood cannot fill the server's stderr.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# How often one kind of message may be printed; the ones held back are counted in the next.
LOG_INTERVAL_S = 60.0
_BUSY_BODY = b'{"error": "the dashboard has as many connections open as --max-connections allows; try again"}'
BUSY_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
                 b"content-length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


class OncePer:
    """Lets each kind of message through at most once per `interval_s`, counting the ones held back."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def allow(self, kind: str) -> str | None:
        """None to hold this one back; else a note on how many were held back since the last."""
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._held[kind] = self._held.get(kind, 0) + 1
            return None
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        return (f" ({held} more like it since the last; such lines are printed at most once "
                f"every {self.interval_s:g} s)") if held else ""

    def __call__(self, kind: str, message: str) -> None:
        """Print `message` to stderr as a warning unless one of its kind was printed lately."""
        held = self.allow(kind)
        if held is not None:
            print(f"dashboard: warning: {message}{held}", file=sys.stderr, flush=True)


NOTE = OncePer()


class OncePerFilter(logging.Filter):
    """Passes a logger's records through `NOTE`'s rate limit (uvicorn logs a warning per malformed
    request and a traceback per failed one: a flood of either would fill stderr)."""

    def filter(self, record: logging.LogRecord) -> bool:
        held = NOTE.allow(f"log:{record.msg}")
        if held is None:
            return False
        if held and isinstance(record.msg, str):
            record.msg += held.replace("%", "%%")
        return True


def quiet_loop_errors(loop: asyncio.AbstractEventLoop) -> None:
    """The event loop's own errors (such as "socket.accept() out of system resource", once per
    attempt) as rate-limited lines instead of a traceback each."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        detail = f": {type(error).__name__}: {error}" if error is not None else ""
        NOTE(f"loop:{context.get('message')}", f"{context.get('message', 'event loop error')}{detail}")

    loop.set_exception_handler(handler)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a total deadline per request and a bound on open connections
    (set on the subclass `guarded_protocol` makes)."""

    request_timeout_s: ClassVar[float] = 30.0
    max_connections: ClassVar[int] = 256

    _refused = False
    _deadline: asyncio.TimerHandle | None = None
    _unread: asyncio.TimerHandle | None = None  # set while the client leaves its answer unread
    # When the connection last stopped being answered (opened, or its last response sent).
    _idle_since = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections and not self._make_room():
            self._refused = True
            self.transport = transport
            NOTE("busy", f"refused new connections: {len(self.connections)} are open and being answered, "
                         f"the most --max-connections allows")
            transport.write(BUSY_RESPONSE)
            transport.close()
            return
        super().connection_made(transport)
        self._idle_since = time.monotonic()
        self._arm()

    def _make_room(self) -> bool:
        """Close the connection that has waited longest without being answered (still sending its
        request, or idle between requests); False if every one is being answered."""
        waiting = [c for c in self.connections if isinstance(c, GuardedH11Protocol) and not c._answering()]
        if not waiting:
            return False
        NOTE("evict", f"{len(self.connections)} connections are open, the most --max-connections allows; "
                      f"closing the ones waiting longest for a whole request to make room")
        min(waiting, key=lambda c: c._idle_since)._drop()
        return True

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete and not self.cycle.more_body

    def _reading_request(self) -> bool:
        """Whether a request has begun and is not yet wholly read (headers or body still due)."""
        if self.cycle is None or self.cycle.response_complete:
            # Between requests: any byte buffered starts the next one.
            return bool(self.conn.trailing_data[0]) or self.conn.their_state is h11.SEND_BODY
        return self.cycle.more_body

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.request_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.transport.is_closing() and self._reading_request():
            self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._idle_since = time.monotonic()
        # A pipelined request may already be buffered; otherwise uvicorn's idle (keep-alive)
        # timeout holds until the next byte, which starts the next request's deadline.
        if not self.transport.is_closing() and self._reading_request():
            self._arm()

    def _timed_out(self) -> None:
        self._deadline = None
        NOTE("timeout", f"closed connections that had not sent a whole request within --request-timeout "
                        f"{self.request_timeout_s:g} s")
        self._drop()

    def pause_writing(self) -> None:
        # The client is not reading its answer: it gets as long to read it as to send a request.
        super().pause_writing()
        if self._unread is None:
            self._unread = self.loop.call_later(self.request_timeout_s, self._not_read)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None

    def _not_read(self) -> None:
        self._unread = None
        NOTE("unread", f"closed connections whose client had not read its answer within --request-timeout "
                       f"{self.request_timeout_s:g} s")
        self._drop(abort=True)

    def _drop(self, abort: bool = False) -> None:
        self._disarm()
        # Out of the count at once: the caller may be making room for a new connection.
        self.connections.discard(self)
        # Closing waits to send what is buffered, which a client that does not read never takes:
        # the descriptor would stay held.
        if abort or self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._disarm()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None
        super().connection_lost(exc)


def guarded_protocol(request_timeout_s: float, max_connections: int) -> type[GuardedH11Protocol]:
    """A `GuardedH11Protocol` class with these limits, for `uvicorn.Config(http=...)`."""
    return type("DashboardH11Protocol", (GuardedH11Protocol,),
                {"request_timeout_s": request_timeout_s, "max_connections": max_connections})
