"""Going on with a sweep whose cluster was lost: `python -m experiments.sweep <its options> --resume CSV`.

When the cluster's head is lost, the sweep writes its results CSV with what it has (the trials that
completed, with their results; the others `lost`, each with its run uuid) and names the command to
go on: the same options, which plan the same trials (a grid in its order, random draws from the
same --sweep-seed), and `--resume` with that CSV. The completed trials are kept as they are; every
other trial runs again under its own run uuid, from its last checkpoint when it has one
(experiments/run/plan.py), and the CSV is written again, whole.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.sweep_rows import NUMBERS, RESULTS, SCORE, TrialRow
from experiments.sweep_space import SweepError


def _number(text: str) -> Any:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def resumed_rows(path: Path, rows: list[TrialRow], names: list[str]) -> set[int]:
    """`rows` (the trials planned, in order) given the run uuids of the CSV at `path` and, for the
    trials it says completed, their results; returns those trials' indices. `SweepError` (one line)
    when the file is not this sweep's results."""
    where = f"--resume {path}"
    try:
        # O_NONBLOCK: a FIFO (or a device) given here opens at once and is refused by its type,
        # instead of the sweep waiting for ever on a writer that never comes.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise SweepError(f"{where}: expected a sweep's results CSV (a regular file; this is a FIFO, device, socket or folder)")
        os.set_blocking(fd, True)
        with open(fd, newline="") as f:
            saved = {row.get("trial"): row for row in csv.DictReader(f)}
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise SweepError(f"{where}: expected a sweep's results CSV ({getattr(e, 'strerror', None) or e})") from None
    if sorted(saved, key=str) != sorted((str(r.trial) for r in rows), key=str):
        raise SweepError(f"{where}: expected the results of this sweep's {len(rows)} trials (it holds {len(saved)} rows): "
                         "give the options the sweep was started with")
    done = set()
    uuids = [old.get("run_uuid") for old in saved.values()]
    if len(set(uuids)) != len(uuids):
        raise SweepError(f"{where}: expected one run per trial (a run_uuid is listed twice)")
    for i, row in enumerate(rows):
        old = saved[str(row.trial)]
        for name in names:
            if old.get(name) != str(row.params[name]):
                raise SweepError(f"{where}: trial {row.trial} has {name}={old.get(name)} there, {row.params[name]} here: "
                                 "give the options the sweep was started with")
        # The uuid names the folder the trial goes on in: anything but a run's uuid (`../../x`) would
        # put it outside the data folder, or continue and rewrite another run (as population.json's check).
        if not re.fullmatch(r"[0-9a-f]{32}", old.get("run_uuid") or ""):
            raise SweepError(f"{where}: trial {row.trial} has run_uuid={old.get('run_uuid')!r} there: expected the uuid "
                             "of a run (32 hex digits)")
        row.run_uuid = old["run_uuid"]
        if old.get("status") == "completed":
            done.add(i)
            row.status = "completed"
            texts = {k: old.get(SCORE if k == "score" else k) or "" for k in RESULTS}
            row.take_results({k: _number(text) if k in NUMBERS else text or None for k, text in texts.items()})
            row.retries = _number(old.get("retries") or "0") or 0  # a CSV of an older sweep has none
    return done


def go_on_command(prog: str, argv: list[str], csv_path: Path) -> str:
    """The command that goes on with this sweep: its own options, `--resume` its CSV (replacing a
    `--resume` or `--csv` given)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--resume", "--csv"):
            skip = True
            continue
        if arg.startswith(("--resume=", "--csv=")):
            continue
        kept.append(arg)
    return " ".join([prog, *map(shlex.quote, kept), "--resume", shlex.quote(str(csv_path))])


def lost_line(address: str, rows: list[TrialRow], command: str) -> str:
    completed = sum(r.status == "completed" for r in rows)
    return (f"sweep: the Ray cluster at {address} was lost (its head); {completed} of {len(rows)} trials completed and are "
            f"kept; go on with: {command}")


def argv_of(argv: Sequence[str] | None) -> list[str]:
    return list(sys.argv[1:] if argv is None else argv)
