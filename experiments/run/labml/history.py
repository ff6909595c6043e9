"""A run that reaches a dashboard late brings its history.

labml sends a dashboard only what a run tracks while it is connected, so a run resumed with
`--dashboard` after training without one (or with another dashboard) would show only its new
updates: a chart of a few thousand steps on a y-axis that makes noise look like learning. Before
labml starts sending, a resumed run posts the updates it keeps in `updates.csv` (every metric it
tracked, at the same agent steps) as one labml packet; the dashboard keeps only the points after
what it already holds (dashboard/handlers.py `drop_known_points`), so a run that reported its
earlier legs there continues the same series, and one that never did gets them whole. The series
come from `updates.csv` only: the score it charts is each update's mean of the last games, which
`games.csv` holds game by game.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

import labml

from configs.urls import app_url, split_credentials

Row = dict[str, float | None]  # a row of the run's updates.csv: update, env_step, then each metric tracked

# labml-app keeps at most 1024 points of a series and merges the rest; sending at most this many
# keeps one packet well under the dashboard's body cap (a few hundred KB for every metric).
MAX_POINTS = 1000
TIMEOUT_S = 30.0


def history_packet(rows: list[Row]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """labml's `track` packet for `rows` (oldest first): each metric's finite values at their agent
    steps, averaged in consecutive blocks (as labml's own sender does) when there are more than
    MAX_POINTS."""
    track = {}
    metrics = [column for column in rows[0] if column not in ("update", "env_step")] if rows else []
    for name in metrics:
        points: list[tuple[float, float]] = []
        for row in rows:
            step, value = row["env_step"], row[name]
            if step is not None and value is not None and math.isfinite(value):
                points.append((step, value))
        if not points:
            continue
        block = -(-len(points) // MAX_POINTS)
        chunks = [points[i:i + block] for i in range(0, len(points), block)]
        track[name] = {"step": [sum(s for s, _ in c) / len(c) if block > 1 else c[0][0] for c in chunks],
                       "value": [sum(v for _, v in c) / len(c) for c in chunks]}
    return {"track": track}


def send_history(dashboard: str, run_uuid: str, updates: Callable[[], list[Row]], keep: int, say: Callable[[str], None]) -> bool:
    """Post the run's `updates()` up to `keep` to `dashboard` (its URL as --dashboard takes it), each
    message to `say`. A dashboard that cannot take them, or records that cannot be read (`OSError`,
    `ValueError`), cost one warning: the run goes on, its new updates are sent."""
    try:
        rows = [row for row in updates() if row["update"] is not None and row["update"] <= keep]
    except (OSError, ValueError) as e:
        say(f"warning: the run's history was not sent to the dashboard: {e}")
        return False
    packet = history_packet(rows)
    if not packet["track"]:
        return True
    url, _ = split_credentials(app_url(dashboard))  # sent as basic authentication (sender.py)
    query = urllib.parse.urlencode({"run_uuid": run_uuid, "labml_version": labml.__version__})
    request = urllib.request.Request(f"{url}/track?{query}", data=json.dumps([packet]).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read(64 * 1024)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        say(f"warning: the dashboard did not take the run's history ({len(rows):,} updates): {reason}; "
            f"it shows the updates from now on")
        return False
    say(f"sent the run's history to the dashboard: {len(rows):,} updates")
    return True
