"""What a sweep shows while its trials run: a status block on stderr, at each change and at least
every 30 s, and one line when a trial is run again.

The driver sees its trials through what each trial's run writes in the shared data folder: its
`summary.json` (status, node, updates, score), written as it starts and at each checkpoint. A trial
is queued until the sweep submits it, starting until its run writes a summary, then running. A
summary that names another node, or starts a new leg (its wall time back near zero), is Ray running
the trial again after its node or process was lost: one line says which trial, where it went and
from which update it goes on (its last checkpoint), and the trial's retries count it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.run.folders import RunFolder
from experiments.sweep_rows import SCORE, TrialRow
from ray_setup.nodes import name_of

PERIOD_S = 30.0  # a block at least this often while nothing changes
LOOK_S = 2.0  # the trials' summaries read at most this often


def node_text(summary: dict[str, Any]) -> str:
    """The node a run's summary names, as a person reads it: its name where the run wrote one
    (ray_setup/nodes.py), else the start of Ray's id (`name_of`)."""
    name, node_id = summary.get("node_name"), summary.get("node_id")
    if name:
        return str(name)
    return name_of({}, str(node_id) if node_id else None)


def leg_start(summary: dict[str, Any]) -> str:
    """The update a run's summary says its present leg started from (its agent steps then, in updates)."""
    updates, steps, leg = summary.get("updates"), summary.get("env_steps"), summary.get("leg_env_steps")
    if not (isinstance(updates, int) and isinstance(steps, int) and isinstance(leg, int) and steps > 0):
        return "?"
    return str(round((steps - leg) * updates / steps))


class SweepStatus:
    """The trials of `rows`, shown with `say` (stderr). `summaries` is where each trial's run writes
    its summary (`data_dir/name/`); `lost_nodes` gives the ids of the nodes the cluster lost so far."""

    def __init__(self, rows: list[TrialRow], summaries: Path, say: Callable[[str], None],
                 lost_nodes: Callable[[], Sequence[str]] = tuple, name_of_node: Callable[[str], str] = lambda node: node[:8],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rows, self.summaries, self.say, self.lost_nodes, self.clock = rows, summaries, say, lost_nodes, clock
        self.name_of_node = name_of_node
        self.started = clock()
        self.shown_at = self.looked_at = -PERIOD_S
        self.shown: tuple[Any, ...] | None = None
        self.running: frozenset[int] = frozenset()
        self.seen: dict[int, dict[str, Any]] = {}  # trial index → its last summary read
        self.lost_said: set[str] = set()

    def look(self, running: frozenset[int]) -> bool:
        """Between waits: read the running trials' summaries (at most every LOOK_S), say what changed,
        and the block when something did or PERIOD_S passed. Returns False (nothing to hurry for)."""
        now = self.clock()
        self.running = running
        if now - self.looked_at >= LOOK_S:
            self.looked_at = now
            for i in sorted(running):
                self._read(i)
            self._lost_nodes()
        state = tuple((self.state_of(i), self.rows[i].node_id, self.rows[i].retries) for i in range(len(self.rows)))
        if state != self.shown or now - self.shown_at >= PERIOD_S:
            self.shown, self.shown_at = state, now
            self.say(self.block(now))
        return False

    def state_of(self, i: int) -> str:
        row = self.rows[i]
        if row.status is not None:
            return row.status
        if i not in self.running:
            return "queued"
        return "running" if i in self.seen else "starting"

    def block(self, now: float) -> str:
        states = [self.state_of(i) for i in range(len(self.rows))]
        counts = {s: states.count(s) for s in dict.fromkeys(states)}
        lines = [f"sweep after {now - self.started:.0f} s: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
        for i, row in enumerate(self.rows):
            seen = self.seen.get(i, {})
            score = row.score if row.status is not None else seen.get(SCORE)
            updates = row.updates if row.status is not None else seen.get("updates")
            lines.append(f"  trial {row.trial:<3} {states[i]:<10} node {row.node_name or '-':<22} "
                         f"retries {row.retries}  update {'-' if updates is None else updates}  "
                         f"{SCORE} {'-' if score is None else f'{score:.1f}'}")
        return "\n".join(lines)

    def _read(self, i: int) -> None:
        row = self.rows[i]
        try:
            summary = json.loads(RunFolder.at(self.summaries / row.run_uuid).summary.read_text())
        except (OSError, ValueError):
            return  # not written yet, or being replaced: the next look reads it
        if not isinstance(summary, dict):
            return
        self.seen_now(i, summary)
        row.node_id, row.node_name = summary.get("node_id") or row.node_id, summary.get("node_name") or row.node_name

    def seen_now(self, i: int, summary: dict[str, Any]) -> None:
        """Trial `i`'s run wrote `summary` (read from its folder, or returned as it ended): a summary of
        a new leg (another node, or its wall time back near zero) is Ray running it again."""
        before = self.seen.get(i)
        self.seen[i] = summary
        if before is not None and (summary.get("node_id") != before.get("node_id")
                                   or summary.get("wall_time_s", 0) < before.get("wall_time_s", 0)):
            row = self.rows[i]
            row.retries += 1
            self.say(f"sweep: trial {row.trial} ran again (retry {row.retries}) on node {node_text(summary)}, "
                     f"from update {leg_start(summary)} (its last checkpoint); it ran on node {node_text(before)}")

    def _lost_nodes(self) -> None:
        """Each trial that ran on a node the cluster lost, said once: Ray runs it again elsewhere."""
        for node in self.lost_nodes():
            if node in self.lost_said:
                continue
            self.lost_said.add(node)
            for i in sorted(self.running):
                if self.seen.get(i, {}).get("node_id") == node:
                    self.say(f"sweep: node {self.name_of_node(node)}'s loss hit trial {self.rows[i].trial}: Ray runs it again on "
                             f"another node, from its last checkpoint (update {self.seen[i].get('updates')} or later)")
