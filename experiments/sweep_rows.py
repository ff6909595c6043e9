"""A sweep's trials as rows: what each trial ran with, how it ended, and the table and CSV they make.

One `TrialRow` per trial, planned before anything runs (its number, run uuid and parameters) and
filled once as its task ends (`ended`), or given the status `lost` when the cluster's head went
before it ended (experiments/sweep.py, `report`); a resumed sweep fills its completed trials from
the CSV (experiments/sweep_resume.py).
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configs.files import atomic_write

SCORE = "score_mean_100"
# What a trial's summary gives its row (the run's own names; `score` is SCORE).
RESULTS = ("score", "games", "updates", "env_steps", "sps", "host", "node_id", "node_name", "run_dir", "error")
NUMBERS = ("score", "games", "updates", "env_steps", "sps")


@dataclass
class TrialRow:
    trial: int  # from 1, in the order planned
    run_uuid: str
    params: dict[str, Any]  # the values searched
    status: str | None = None  # the run's (completed, failed, …), or the sweep's: lost, refused, stopped
    score: float | None = None
    games: int | None = None
    updates: int | None = None
    env_steps: int | None = None
    sps: float | None = None
    host: str | None = None
    node_id: str | None = None  # Ray's, as nodes of one machine share its host name
    node_name: str | None = None  # the node's name for people (ray_setup/nodes.py)
    run_dir: str | None = None
    error: str | None = None
    retries: int = 0  # times Ray ran it again after its node or process was lost (experiments/sweep_status.py)

    def ended(self, summary: dict[str, Any] | None, error: str | None = None, status: str | None = None) -> None:
        """How its task ended: the run's summary, or (none) Ray's error, with `status` the sweep's word for it."""
        if summary is None:
            self.status, self.error, self.score = status or "failed", error, None
            return
        self.status = summary["status"]
        self.take_results({**summary, "score": summary.get(SCORE)})

    def take_results(self, results: dict[str, Any]) -> None:
        """Each of RESULTS from `results` (a missing one: None)."""
        (self.score, self.games, self.updates, self.env_steps, self.sps, self.host, self.node_id, self.node_name, self.run_dir,
         self.error) = (results.get(name) for name in RESULTS)

    def results(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RESULTS}

    def result_line(self) -> str:
        score = "-" if self.score is None else f"{self.score:.1f}"
        return (f"trial {self.trial} {self.status}: {SCORE} {score}  {params_text(self.params)}  run {self.run_uuid}"
                + (f"  ({self.error})" if self.error else ""))


def planned_rows(trials: Sequence[dict[str, Any]]) -> list[TrialRow]:
    return [TrialRow(i + 1, uuid.uuid4().hex, dict(params)) for i, params in enumerate(trials)]


def params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={fmt(v)}" for k, v in params.items())


def fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def sorted_rows(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """Best final score first; trials without a score (no game finished, failed) last."""
    return sorted(rows, key=lambda r: (r.score is None, -(r.score or 0.0), r.trial))


def table(rows: Sequence[TrialRow], names: list[str]) -> str:
    header = ["rank", "trial", SCORE, "games", "status", "retries", "node", *names, "run_uuid"]
    body = [[str(rank), str(r.trial), "-" if r.score is None else f"{r.score:.2f}", "-" if r.games is None else str(r.games),
             r.status or "-", str(r.retries), r.node_name or "-", *(fmt(r.params[n]) for n in names), r.run_uuid]
            for rank, r in enumerate(rows, 1)]
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(header)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in [header, *body])


def write_csv(path: Path, rows: Sequence[TrialRow], names: list[str]) -> None:
    """The table, ranked as given, with every result; written whole (or not at all), 0600 like the
    lineage and summaries."""
    columns = ["rank", "trial", SCORE, "games", "updates", "env_steps", "sps", "status", "retries", *names, "run_uuid", "host",
               "node_id", "node_name", "run_dir", "error"]
    text = io.StringIO()
    writer = csv.DictWriter(text, columns)
    writer.writeheader()
    for rank, r in enumerate(rows, 1):
        writer.writerow({"rank": rank, "trial": r.trial, SCORE: r.score, "status": r.status, "retries": r.retries, "run_uuid": r.run_uuid,
                         **{name: value for name, value in r.results().items() if name != "score"}, **{n: r.params[n] for n in names}})
    atomic_write(path, text.getvalue().encode())


def print_comparison(dashboard: str | None, rows: Sequence[TrialRow]) -> None:
    """The dashboard's comparison page of the trials that trained (best first), when they reported to one."""
    trained = [r.run_uuid for r in rows if r.updates is not None]  # a trial Ray lost never reached it
    if dashboard and trained:
        from dashboard.client import compare_line

        print(compare_line(dashboard, trained, "trials"), flush=True)  # stdout: what a script reads
