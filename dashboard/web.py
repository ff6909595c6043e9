"""HTTP plumbing of the dashboard's endpoints: bad input becomes a 4xx JSON error, never a 500.

`BadRequest` carries a status and a message from any check to `json_endpoint`, which turns it
into ``{"error": message}``; `BodySizeLimit` refuses oversized bodies before anything reads them;
`answer_errors_as_json` installs both on an app, with JSON answers for the failures that reach it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BadRequest(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


class BodyTooLarge(Exception):
    """A streamed body passed the limit; raised inside the endpoint, answered with 413."""


def error_response(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


def json_endpoint(func: Callable[..., Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint calling `func(request, **path_params)`; dicts become JSON, `BadRequest` 4xx."""

    async def endpoint(request: Request) -> Response:
        try:
            result = await func(request, **request.path_params)
        except BadRequest as e:
            return error_response(e.status_code, e.message)
        return result if isinstance(result, Response) else JSONResponse(result)

    endpoint.__name__ = func.__name__
    return endpoint


class BodySizeLimit:
    """Refuse request bodies over `max_bytes`, declared or streamed, with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                await error_response(400, "invalid Content-Length header")(scope, receive, send)
                return
            if too_large:
                await self._refuse(scope, receive, send)
                return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the endpoint; the app's handler turns it into a 413.
                    raise BodyTooLarge()
            return message

        await self.app(scope, counting_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await error_response(413, f"request body is larger than {self.max_bytes} bytes")(scope, receive, send)


def answer_errors_as_json(app: FastAPI, max_body_bytes: int) -> None:
    """Limit request bodies to `max_body_bytes` and answer what fails with a JSON error.

    Bad input gets a 4xx; any other failure a bare 500 (the details stay in the server's log).
    """
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    app.add_exception_handler(BodyTooLarge, lambda request, exc: error_response(
        413, f"request body is larger than {max_body_bytes} bytes"))
    app.add_exception_handler(json.JSONDecodeError, lambda request, exc: error_response(
        400, f"malformed JSON body: {exc}"))
    app.add_exception_handler(Exception, lambda request, exc: error_response(
        500, f"internal error: {type(exc).__name__}"))
