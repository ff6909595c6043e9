"""The stops of a training command's start-up, followed call by call from `main` until its plan is
made (docs/architecture.md, "Start-up, call by call").

    python tools/startup_walk.py [TRAINING OPTIONS]      e.g. --data-dir runs --resume 1a2b3c4d

Runs `experiments.breakout.main` on the options given and ends it the moment `plan_launch` returns
to it: planning starts nothing and writes nothing, so a walk leaves the data dir as it was. Every
function of ours that the walk reaches is a stop, at its first call, in order: the walk goes into
the functions of `experiments/` and counts those of `configs/`, `game/` and `ppo/` where they are
called, without going into them (lower floors a reader can take as given). Lambdas, comprehensions
and nested functions are part of the function that holds them; module code run by an import is
not a stop. A climb is a stop on a higher floor than the stop before it (configs/ and game/ are the
ground floor, ppo/ the next, experiments/ the top). Prints the stops, then the totals.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
FLOORS = {"configs": 0, "game": 0, "ppo": 1, "experiments": 2}
WALKED = "experiments"


class Stop(NamedTuple):
    name: str  # the function's qualified name, a nested one's holder
    file: str  # relative to the checkout
    floor: int


class PlanMade(Exception):
    """Raised where `plan_launch` returns to `main`: the walk ends there."""


def _ours(frame: FrameType) -> str | None:
    """The file of `frame` relative to the checkout when it is one of our packages', else None."""
    try:
        path = Path(frame.f_code.co_filename).resolve().relative_to(REPO)
    except ValueError:
        return None
    return path.as_posix() if path.parts[0] in FLOORS else None


def walk(argv: Sequence[str]) -> tuple[list[Stop], int | None]:
    """The stops of `main(argv)` up to its plan, and None; or the stops up to a refusal, and its exit code."""
    from experiments.breakout import main

    stops: dict[str, Stop] = {}
    walked: set[int] = set()  # ids of the live frames the walk went into

    def holder(frame: FrameType) -> str:
        qualname: str = frame.f_code.co_qualname  # type: ignore[attr-defined]  # Python 3.11+ (checked in `main`)
        return qualname.split(".<locals>", 1)[0]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "return" and id(frame) in walked:
            walked.discard(id(frame))
            if frame.f_code.co_name == "plan_launch" and frame.f_back is not None and frame.f_back.f_code is main.__code__:
                sys.setprofile(None)
                raise PlanMade
            return
        if event != "call" or (file := _ours(frame)) is None or frame.f_code.co_name == "<module>":
            return
        if frame.f_code is main.__code__:
            caller_walked = True
        else:  # the nearest function of ours below it on the stack decides (library code in between is skipped)
            caller = frame.f_back
            while caller is not None and _ours(caller) is None:
                caller = caller.f_back
            caller_walked = caller is not None and id(caller) in walked
        if not caller_walked:
            return
        name = holder(frame)
        stops.setdefault(f"{file}:{name}", Stop(name, file, FLOORS[file.split("/")[0]]))
        if file.startswith(WALKED + "/"):
            walked.add(id(frame))

    sys.setprofile(profile)
    try:
        main(list(argv))
    except PlanMade:
        return list(stops.values()), None
    except SystemExit as e:
        return list(stops.values()), e.code if isinstance(e.code, int) else 2
    finally:
        sys.setprofile(None)
    return list(stops.values()), 0  # no refusal, yet main returned without a plan: cannot happen


def climbs(stops: Sequence[Stop]) -> int:
    return sum(later.floor > earlier.floor for earlier, later in itertools.pairwise(stops))


def main(argv: Sequence[str]) -> int:
    if sys.version_info < (3, 11):  # before, a code object does not name the function that holds a nested one
        print("error: the walk needs Python 3.11 or later", file=sys.stderr)
        return 2
    stops, refused = walk(argv)
    for number, stop in enumerate(stops, start=1):
        climb = "climb" if number > 1 and stop.floor > stops[number - 2].floor else ""
        print(f"{number:3}  {stop.name:32} {stop.file:36} {climb}")
    files = len({stop.file for stop in stops})
    print(f"{len(stops)} stops in {files} files, {climbs(stops)} climbs"
          + ("" if refused is None else f" (no plan: the command exited with code {refused})"))
    return 0 if refused is None else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # run as a script: our packages are imported from this checkout
    sys.exit(main(sys.argv[1:]))
