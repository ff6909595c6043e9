"""HTTP plumbing of the dashboard's endpoints: bad input becomes a 4xx JSON error, never a 500;
no answer may be shown in a frame of another site's page (`FramingRefused`).

`BadRequest` carries a status and a message from any check to `json_endpoint` (or to
`guard.RequestGuard`), which turns it into ``{"error": message}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


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



# No page of the dashboard is meant to be shown inside another site's: framed by a page of
# another site (under an invisible layer, say), the owner's clicks on "Apply" or "Archive"
# would be that site's. Both headers are sent: `frame-ancestors` is the standard, X-Frame-Options
# what older browsers read.
FRAME_OPTIONS = "DENY"
FRAME_ANCESTORS = "frame-ancestors 'none'"


def without_framing(policy: str) -> str:
    """A Content-Security-Policy value with its `frame-ancestors` directive (if any) replaced by
    `frame-ancestors 'none'`, every other directive kept as it was."""
    kept = [d.strip() for d in policy.split(";") if d.strip() and d.split()[0].lower() != "frame-ancestors"]
    return "; ".join([*kept, FRAME_ANCESTORS])


class FramingRefused:
    """ASGI middleware: every answer forbids being framed (`X-Frame-Options: DENY` and the CSP's
    `frame-ancestors 'none'`, merged into a policy the answer already carries)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_unframeable(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Frame-Options"] = FRAME_OPTIONS
                policies = headers.getlist("content-security-policy") or [""]
                del headers["content-security-policy"]
                for policy in policies:
                    headers.append("Content-Security-Policy", without_framing(policy))
            await send(message)

        await self.app(scope, receive, send_unframeable)
