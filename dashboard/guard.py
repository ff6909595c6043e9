"""The first thing every request meets: is it for this dashboard, from its own pages, and is its body acceptable.

- DNS rebinding: a page on ``evil.example`` whose name is re-pointed at 127.0.0.1 reaches the
  dashboard with ``Host: evil.example``; only the names the dashboard is served under are answered
  (421 otherwise).  An address typed into a browser is always such a name.
- Cross-site writes: a page on another site can still send "simple" requests (a ``text/plain``
  POST, ``fetch(..., {mode: 'no-cors'})``) without any CORS check.  A state-changing request must
  carry a JSON body (which no simple request can) and, if it has an ``Origin``, this dashboard's
  (browsers always send one on such requests; labml's client and `experiments.tweak` send none).
- Bodies: at most `max_body_bytes`, declared or streamed (413); read here, then parsed strictly
  (`strict_json`) in a worker thread, bodies past LARGE_BODY_BYTES one at a time, so large bodies
  never stall other requests; the parsed value is handed on in ``scope["state"]`` and the body
  replayed to the app.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dashboard import strict_json
from dashboard.web import BadRequest, error_response

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# The key under scope["state"] holding a request's parsed JSON body.
JSON_BODY = "dashboard_json_body"
# Bodies past this size are parsed, and checked (`large_body_turn`), one at a time: that work
# holds Python's interpreter lock, so several large bodies at once would leave the event loop,
# and every other request, a small share of it.  labml's usual packets are a few KB.
LARGE_BODY_BYTES = 64 * 1024
# The key under scope["state"] holding the guard's one-at-a-time limiter for large bodies, so
# that the handlers which work on such a body later take their turn from the same one.
LARGE_BODY_TURN = "dashboard_large_body_turn"
_HOST_NAME_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$")


def normalize_host_name(name: str) -> str:
    """`name` as it appears in a Host header (lower case, IPv6 in brackets); ValueError if it is not a host name."""
    name = name.strip().lower().rstrip(".")
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        if not _HOST_NAME_RE.match(name) or len(name) > 253:
            raise ValueError(f"{name!r} is not a host name") from None
        return name
    return f"[{address}]" if address.version == 6 else str(address)


def allowed_host_names(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The loopback names, the address the server is bound to (unless a wildcard) and `extra`."""
    names = set(LOOPBACK_NAMES)
    if bind_host not in WILDCARD_BINDS:
        names.add(normalize_host_name(bind_host))
    names.update(normalize_host_name(name) for name in extra)
    return frozenset(names)


def split_host(value: str) -> tuple[str, int | None] | None:
    """(name, port or None) of a Host header value, the name normalized; None if malformed."""
    parts = urllib.parse.urlsplit(f"//{value.strip()}")
    try:
        port = parts.port
        name = normalize_host_name(parts.hostname or "")
    except ValueError:
        return None
    if parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return name, port


def same_origin(origin: str, host: str) -> bool:
    """Whether an Origin header names the site the request was sent to (by its Host header).

    Scheme is not compared: behind a TLS proxy the page is https while the dashboard sees http.
    """
    parts = urllib.parse.urlsplit(origin)
    target = split_host(host)
    if parts.scheme not in DEFAULT_PORTS or target is None or parts.path not in ("", "/"):
        return False
    try:
        origin_port = parts.port or DEFAULT_PORTS[parts.scheme]
        origin_name = normalize_host_name(parts.hostname or "")
    except ValueError:
        return False
    return (origin_name, origin_port) == (target[0], target[1] or DEFAULT_PORTS[parts.scheme])


def _preview(value: str) -> str:
    return ascii(value[:80])


class RequestGuard:
    """ASGI middleware: Host allowlist, same-origin writes, JSON-only bodies under a size cap."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str], max_body_bytes: int) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.max_body_bytes = max_body_bytes
        self.large_bodies: anyio.CapacityLimiter | None = None  # made on first use, inside the server's event loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.large_bodies is None:
            self.large_bodies = anyio.CapacityLimiter(1)
        scope.setdefault("state", {})[LARGE_BODY_TURN] = self.large_bodies
        try:
            replay = await self._check(scope, receive)
        except BadRequest as e:
            await error_response(e.status_code, e.message)(scope, receive, send)
            return
        await self.app(scope, replay or receive, send)

    async def _check(self, scope: Scope, receive: Receive) -> Receive | None:
        """Raise `BadRequest` for a refused request; for an accepted body, a `receive` replaying it."""
        headers = Headers(scope=scope)
        self.check_host(headers.get("host"))
        if scope["method"] in SAFE_METHODS:
            return None  # reads change nothing; cross-site pages cannot read the answers
        check_origin(headers.get("origin"), headers.get("host", ""))
        if not has_body(headers):
            return None
        check_json_content_type(headers.get("content-type"))
        raw = await read_body(receive, self._declared_length(headers), self.max_body_bytes)
        # Parsing a body of up to the cap takes tens of milliseconds: off the event loop.
        limiter = large_body_turn(scope, len(raw))
        scope.setdefault("state", {})[JSON_BODY] = await anyio.to_thread.run_sync(strict_json.loads, raw,
                                                                                  limiter=limiter)
        return replaying(raw, receive)

    def check_host(self, host: str | None) -> None:
        # The port plays no part: a rebinding page can use any, and a proxy may rewrite it.
        parsed = None if host is None else split_host(host)
        if parsed is None or parsed[0] not in self.allowed_hosts:
            allowed = ", ".join(sorted(self.allowed_hosts))
            raise BadRequest(421, f"Host {'(none)' if host is None else _preview(host)} is not a name this dashboard is served under; "
                                  f"expected one of {allowed} (add names with --allowed-host)")

    def _declared_length(self, headers: Headers) -> int | None:
        declared = headers.get("content-length")
        if declared is None:
            return None
        if not declared.isdigit():
            raise BadRequest(400, f"Content-Length {_preview(declared)}: expected a number of bytes")
        if int(declared) > self.max_body_bytes:
            raise BadRequest(413, f"request body of {declared} bytes is larger than {self.max_body_bytes} bytes")
        return int(declared)


def check_origin(origin: str | None, host: str) -> None:
    if origin is not None and not same_origin(origin, host):
        raise BadRequest(403, f"Origin {_preview(origin)} is not this dashboard's (Host {_preview(host)}); "
                              f"cross-site requests may only read")


def has_body(headers: Headers) -> bool:
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def check_json_content_type(content_type: str | None) -> None:
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise BadRequest(415, f"Content-Type {_preview(content_type or '(none)')}: expected application/json")


async def read_body(receive: Receive, declared: int | None, max_bytes: int) -> bytes:
    """The whole request body, or `BadRequest` (413) as soon as it passes `max_bytes`."""
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest(400, "the client closed the connection before sending its whole body")
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > max_bytes:
            raise BadRequest(413, f"request body is larger than {max_bytes} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if declared is not None and received != declared:
        raise BadRequest(400, f"Content-Length {declared} but {received} bytes were sent")
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app the body already read, then waits on the client as usual."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def large_body_turn(scope: Scope, size: int) -> anyio.CapacityLimiter | None:
    """The worker-thread limiter for work on a body of `size` bytes of this request: one at a time
    past LARGE_BODY_BYTES (the guard's limiter), the default pool for the others."""
    if size <= LARGE_BODY_BYTES:
        return None
    limiter: anyio.CapacityLimiter = scope["state"][LARGE_BODY_TURN]
    return limiter


def parsed_json(scope: Scope) -> Any:
    """The body `RequestGuard` parsed for this request; KeyError if there was none."""
    return scope.get("state", {})[JSON_BODY]
