"""The stays of a training command's start-up, followed call by call from `main` to `TrainingRun`
(docs/architecture.md, "Start-up, call by call").

    python tools/startup_walk.py [TRAINING OPTIONS]      e.g. --data-dir runs --resume 1a2b3c4d

Runs `experiments.breakout.main` on the options given and ends it the moment it constructs its
`TrainingRun`: up to there nothing is started or written, so a walk leaves the data dir as it was.
The rule: every function of ours (any package: ray_setup/, configs/, game/, ppo/, dashboard/,
experiments/) at its first call, in the order the calls run, into every package, as a reader reads
each function once; a call is followed where a function of ours makes it (not where a library
calls back into ours, nor where module code runs as it is imported). A stay is a file
entered: consecutive functions in one file are one stay. A climb is a stay on a higher floor than the stay before it (ray_setup/ 0, configs/
and game/ 1, ppo/ and dashboard/ 2, experiments/ 3). Prints the stays, then the totals.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
FLOORS = {"ray_setup": 0, "configs": 1, "game": 1, "ppo": 2, "dashboard": 2, "experiments": 3}


class Stay(NamedTuple):
    file: str  # relative to the checkout
    calls: tuple[str, ...]  # the functions called there, in order, each once (a nested one's holder)
    floor: int


class RunMade(Exception):
    """Raised as `TrainingRun` is constructed: the walk ends there."""


def _ours(frame: FrameType) -> str | None:
    """The file of `frame` relative to the checkout when it is one of our packages', else None."""
    try:
        path = Path(frame.f_code.co_filename).resolve().relative_to(REPO)
    except ValueError:
        return None
    return path.as_posix() if path.parts[0] in FLOORS else None


def walk(argv: Sequence[str]) -> tuple[list[Stay], int | None]:
    """The stays of `main(argv)` up to its `TrainingRun`, and None; or those up to a refusal, and its exit code."""
    from experiments.breakout import main

    calls: list[tuple[str, str]] = []  # (file, function) of each function at its first call, in order
    seen: set[tuple[str, str]] = set()

    def holder(frame: FrameType) -> str:
        qualname: str = frame.f_code.co_qualname  # type: ignore[attr-defined]  # Python 3.11+ (checked in `main`)
        return qualname.split(".<locals>", 1)[0]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or (file := _ours(frame)) is None or frame.f_code.co_name == "<module>":
            return
        caller = frame.f_back  # a call written in a function of ours: not a library's call back, nor an import's
        if frame.f_code is not main.__code__ and (caller is None or _ours(caller) is None or caller.f_code.co_name == "<module>"):
            return
        if (file, holder(frame)) not in seen:  # a reader reads a function once, at its first call
            seen.add((file, holder(frame)))
            calls.append((file, holder(frame)))
        if holder(frame) == "TrainingRun.__init__" and file == "experiments/run/lifecycle.py":
            sys.setprofile(None)
            raise RunMade

    sys.setprofile(profile)
    try:
        main(list(argv))
    except RunMade:
        return stays_of(calls), None
    except SystemExit as e:
        return stays_of(calls), e.code if isinstance(e.code, int) else 2
    finally:
        sys.setprofile(None)
    return stays_of(calls), 0  # no refusal, yet main returned without a run: cannot happen


def stays_of(calls: Sequence[tuple[str, str]]) -> list[Stay]:
    stays = []
    for file, group in itertools.groupby(calls, key=lambda call: call[0]):
        stays.append(Stay(file, tuple(dict.fromkeys(name for _, name in group)), FLOORS[file.split("/")[0]]))
    return stays


def climbs(stays: Sequence[Stay]) -> int:
    return sum(later.floor > earlier.floor for earlier, later in itertools.pairwise(stays))


def main(argv: Sequence[str]) -> int:
    if sys.version_info < (3, 11):  # before, a code object does not name the function that holds a nested one
        print("error: the walk needs Python 3.11 or later", file=sys.stderr)
        return 2
    stays, refused = walk(argv)
    for number, stay in enumerate(stays, start=1):
        climb = "climb" if number > 1 and stay.floor > stays[number - 2].floor else ""
        print(f"{number:3}  {stay.file:36} {climb:5}  {', '.join(stay.calls)}")
    files = len({stay.file for stay in stays})
    print(f"{len(stays)} stays in {files} files, {climbs(stays)} climbs"
          + ("" if refused is None else f" (no run: the command exited with code {refused})"))
    return 0 if refused is None else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # run as a script: our packages are imported from this checkout
    sys.exit(main(sys.argv[1:]))
