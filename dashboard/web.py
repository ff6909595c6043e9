"""HTTP plumbing of the dashboard's endpoints: bad input becomes a 4xx JSON error, never a 500.

`BadRequest` carries a status and a message from any check to `json_endpoint` (or to
`guard.RequestGuard`), which turns it into ``{"error": message}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
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

