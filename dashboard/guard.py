"""The first thing every request meets: is it for this dashboard.

DNS rebinding: a page on ``evil.example`` whose name is re-pointed at 127.0.0.1 reaches the
dashboard with ``Host: evil.example``; only the names the dashboard is served under are answered
(421 otherwise).  An address typed into a browser is always such a name.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from dashboard.web import BadRequest, error_response

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "")
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


def _preview(value: str) -> str:
    return ascii(value[:80])


class RequestGuard:
    """ASGI middleware: only requests addressed to an allowed host name get through."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str]) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self.check_host(Headers(scope=scope).get("host"))
        except BadRequest as e:
            await error_response(e.status_code, e.message)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check_host(self, host: str | None) -> None:
        # The port plays no part: a rebinding page can use any, and a proxy may rewrite it.
        parsed = None if host is None else split_host(host)
        if parsed is None or parsed[0] not in self.allowed_hosts:
            allowed = ", ".join(sorted(self.allowed_hosts))
            raise BadRequest(421, f"Host {'(none)' if host is None else _preview(host)} is not a name this dashboard is served under; "
                                  f"expected one of {allowed} (add names with --allowed-host)")
