"""One writer at a time in labml-app's store, with labml's updates stored off the event loop.

labml-app stores synchronously: a new run's records are about twenty fsynced files, hundreds of
milliseconds during which the event loop answers nothing, and an HTTP request takes tens of
loop iterations to be answered.  A flood of updates (many new runs at once) thus made every page
and API request wait seconds.  So:
- labml-app's part of `/track` (storing the update, claiming a new run) runs in a worker thread
  (`StoreLane.in_thread`): the event loop keeps answering other requests meanwhile;
- the store has one writer at a time (`StoreLane.turn`): those updates, one after another, and the
  front-end's own writes (rename, archive, delete, preferences), so no two read-modify-writes of
  one record interleave.  Reads go on beside them: every file is replaced whole;
- at most `MAX_WAITING_UPDATES` updates wait for their turn; past that `/track` is answered 429 at
  once (labml's client retries in a few seconds), so a flood cannot hold every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

from dashboard.connections import NOTE
from dashboard.web import error_response

MAX_WAITING_UPDATES = 8


class StoreLane:
    def __init__(self, max_waiting_updates: int = MAX_WAITING_UPDATES) -> None:
        self.max_waiting_updates = max_waiting_updates
        self.waiting = 0
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._lock.release()

    async def in_thread(self, coroutine: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kwargs: Any) -> Any:
        """`await coroutine(*args, **kwargs)` in its turn, on an event loop of a worker thread."""
        async with self.turn():
            return await anyio.to_thread.run_sync(lambda: asyncio.run(coroutine(*args, **kwargs)))

    def admitting(self, app: ASGIApp) -> ASGIApp:
        """`app` (labml's `/track`), answered 429 while `max_waiting_updates` already wait."""

        async def admit(scope: Scope, receive: Receive, send: Send) -> None:
            if self.waiting >= self.max_waiting_updates:
                NOTE("lane", f"answered updates 429: {self.waiting} were already waiting to be stored")
                await error_response(429, f"the dashboard has {self.waiting} updates waiting to be stored; "
                                          f"try again in a few seconds")(scope, receive, send)
                return
            await app(scope, receive, send)

        return admit

    def one_writer(self, app: ASGIApp) -> ASGIApp:
        """`app` (a front-end write), run in its turn."""

        async def in_turn(scope: Scope, receive: Receive, send: Send) -> None:
            async with self.turn():
                await app(scope, receive, send)

        return in_turn
