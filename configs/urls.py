"""The dashboard option's URL in each form it takes, and credentials kept out of every URL we record.

A `--dashboard` URL may carry `user:password@` for an authenticating proxy in front of the
dashboard: the credentials are sent as HTTP basic authentication and never written to a run
folder, a checkpoint or a message. The training side (labml's sender) and the dashboard's own
clients (`tweak`, `pbt`) both read URLs through here.
"""

from __future__ import annotations

import urllib.parse

DEFAULT_DASHBOARD = "http://127.0.0.1:5005"


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """(`url` without its user:password part, the credentials or None)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    credentials = (urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""))
    return bare, credentials if any(credentials) else None


def strip_userinfo(url: str) -> str:
    """`url` without its user/password part: `https://user:token@host/repo.git` → `https://host/repo.git`,
    `user@host:repo.git` (git's scp form) → `host:repo.git`. Anything else is returned as it is.
    Applied to a dashboard URL and to every git remote before labml or a checkpoint records it."""
    if "://" in url:
        return split_credentials(url)[0]
    head, at, rest = url.rpartition("@")
    if at and "/" not in head and ":" in rest:  # scp form: [userinfo@]host:path
        return rest
    return url


def app_url(dashboard: str) -> str:
    """labml's `app_url` for a dashboard: a bare http://host:port gets labml-app's track path."""
    base = dashboard.rstrip("/")
    return base if "/api/" in base else f"{base}/api/v1/default"


def dashboard_page(dashboard: str) -> str:
    """The dashboard's address without labml's track path: `…:5005/api/v1/default` → `…:5005`."""
    return dashboard.split("/api/", 1)[0].rstrip("/")


def run_page(dashboard: str, run_uuid: str) -> str:
    """The run's page on the dashboard."""
    return f'{dashboard_page(dashboard)}/run/{urllib.parse.quote(run_uuid, safe="")}'
