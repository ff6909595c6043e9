"""HTTP plumbing of the dashboard's endpoints: bad input becomes a 4xx JSON error, never a 500.

`BadRequest` carries a status and a message from any check to `json_endpoint` (or to
`guard.RequestGuard`), which turns it into ``{"error": message}``; `answer_errors_as_json` gives
an app JSON answers for the failures that reach it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response


class BadRequest(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


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


def answer_errors_as_json(app: FastAPI) -> None:
    """Answer what fails with a JSON error: bad input a 4xx; any other failure a bare 500 (the
    details stay in the server's log)."""
    app.add_exception_handler(json.JSONDecodeError, lambda request, exc: error_response(
        400, f"malformed JSON body: {exc}"))
    app.add_exception_handler(Exception, lambda request, exc: error_response(
        500, f"internal error: {type(exc).__name__}"))
