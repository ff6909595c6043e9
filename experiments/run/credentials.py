"""Credentials never reach a run folder: a dashboard URL or a git remote is recorded without its
user/password part, and the dashboard URL labml is given is completed here."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def app_url(dashboard: str | None) -> str | None:
    """labml's `app_url` for a dashboard: a bare http://host:port gets labml-app's track path."""
    if dashboard is None:
        return None
    base = dashboard.rstrip("/")
    return base if "/api/" in base else f"{base}/api/v1/default"


def strip_userinfo(url: str) -> str:
    """`url` without its user/password part: `https://user:token@host/repo.git` → `https://host/repo.git`,
    `user@host:repo.git` (git's scp form) → `host:repo.git`. Anything else is returned as it is.

    Applied to every remote URL before labml (run.yaml, the dashboard) or a checkpoint records it:
    a token in a git remote or a dashboard URL must never land in a run folder.
    """
    if "://" in url:
        parts = urlsplit(url)
        if "@" in parts.netloc:
            return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        return url
    head, at, rest = url.rpartition("@")
    if at and "/" not in head and ":" in rest:  # scp form: [userinfo@]host:path
        return rest
    return url
