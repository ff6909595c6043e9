"""A population's record, `population.json`: what it is, how it is written, and how a `--resume`
reads it back.

The record is input as much as the run folders are (whoever may write the data dir may have
edited it), so `load` takes nothing on trust: it is read without following a link, and every
field is checked (its type, its range, its agreement with the others) before anything starts,
with one line naming the field and the value it holds (`PopulationFileError`). It is written
whole under a temp name of its own and renamed into place (`configs.files.atomic_write`), so a link
or a hard link planted where it or its temp file belongs is replaced, never written through.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from configs.cli import value_converter
from configs.fields import MAX_SEED
from configs.files import atomic_write
from configs.launch import config_from_overrides
from configs.ppo import LIVE_RANGES, ConfigError, PPOConfig, live_value_problem
from experiments.pbt.explore import check_explored
from experiments.run.folders import RunFolder, check_plain_folder, publish
from game.atari import is_known_game

STATE = "population.json"
MAX_POPULATION = 1024  # members are listed, started and ranked one by one: a typo of 10**9 must not start
MAX_CPUS = 1024
MAX_RETRIES = 100
MAX_STATE_BYTES = 16 * 2**20  # a record of 1,024 members is a few hundred KB
PER_MEMBER = ("seed", "stop_after_env_steps", "resume")  # set for each member's segment, never shared
LEG_KEYS = ("dashboard", "ray_address")  # where a leg's members report and run: said when a resume changes them
KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFIFO: "a FIFO",
         stat.S_IFSOCK: "a socket"}


class PopulationFileError(ValueError):
    """A population.json that cannot be resumed: the message names the field and its value."""


@dataclass
class Population:
    folder: str
    interval: int
    explore: list[str]
    last_update: int
    batch_size: int
    fixed: dict[str, Any]  # the training options every member shares
    members: list[dict[str, Any]]  # {"run_uuid", "seed"}
    cpus_per_member: float
    max_retries: int
    private_dashboard: bool
    generation: int = 0  # exploit/explore rounds done
    unqueued: dict[str, dict[str, Any]] = field(default_factory=dict)  # member → explored values not yet on the dashboard
    stopped: list[str] = field(default_factory=list)  # why a session ended early, for the record
    # The first leg's dashboard (None: a private one) and Ray cluster (None: a private Ray), so a
    # resume says where it differs; a record made before it existed takes the first resume's.
    first_leg: dict[str, str | None] | None = None

    @property
    def path(self) -> Path:
        return Path(self.folder)

    def save(self) -> None:
        atomic_write(self.path / STATE, json.dumps(asdict(self), indent=1).encode())  # whole or not at all
        publish(self.path / STATE)  # the mode of the run folders' files, not mkstemp's 0600

    @classmethod
    def load(cls, folder: Path) -> Population:
        """The population recorded in `folder`, every field checked (`PopulationFileError`)."""
        return checked(read_record(folder / STATE), folder.resolve())

    def targets(self) -> list[int]:
        """The update each generation's segment ends at: every `interval`, and the last one."""
        return [*range(self.interval, self.last_update, self.interval), self.last_update]

    def run_dir(self, member: int) -> Path | None:
        folder = RunFolder.named(Path(self.fixed["data_dir"]), self.members[member]["run_uuid"], "resume")
        return folder.path if folder is not None else None

    def summary(self, member: int) -> dict[str, Any]:
        run_dir = self.run_dir(member)
        try:
            return dict(json.loads(RunFolder.at(run_dir).summary.read_text())) if run_dir else {}
        except (OSError, ValueError):
            return {}


def read_record(path: Path) -> Any:
    """`path` parsed as JSON, opened without following a link (a FIFO is refused, not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise PopulationFileError(f"{STATE} cannot be opened ({e.strerror})") from None
    kind = stat.S_IFMT(os.fstat(fd).st_mode)
    if kind != stat.S_IFREG:  # checked on the descriptor, before any read (a folder cannot even be wrapped as a file)
        os.close(fd)
        raise PopulationFileError(f"{STATE} is {KINDS.get(kind, 'not a regular file')}: expected a regular file, "
                                  "a population's record")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise PopulationFileError(f"{STATE} is over {MAX_STATE_BYTES:,} bytes: expected a population's record")
    try:
        return json.loads(data.decode())
    except UnicodeDecodeError as e:
        raise PopulationFileError(f"{STATE} is not UTF-8 text (byte {e.start:,} cannot be decoded)") from None
    except json.JSONDecodeError as e:  # its position, never the text: the file may be a copy of another
        raise PopulationFileError(f"{STATE} is not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except (ValueError, RecursionError):  # an integer of thousands of digits, arrays nested thousands deep
        raise PopulationFileError(f"{STATE} is not a population's record (a number or a nesting too large to read)") from None


def shown(value: object) -> str:
    """A value of the record as a message quotes it: as JSON, cut at 60 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:59] + "…"


def _integer(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _of_type(value: object, annotation: object) -> bool:
    """Whether JSON's `value` is of a config field's type (`int`, `float | None`, …): a bool is no
    number, an integer is a float too."""
    kinds = typing.get_args(annotation) or (annotation,)
    if value is None or isinstance(value, bool):
        return type(value) in kinds
    if isinstance(value, int):
        return int in kinds or float in kinds
    return (isinstance(value, float) and float in kinds) or (isinstance(value, str) and str in kinds)


def _bad(values: dict[str, Any], name: str, expected: str) -> PopulationFileError:
    """The one line for field `name` (a path such as `members[1].seed`) of the record `values`."""
    value: Any = values
    for part in name.replace("]", "").replace("[", ".").split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return PopulationFileError(f"{STATE}'s {name} is {shown(value)}: expected {expected}")


def checked(data: object, folder: Path) -> Population:
    """`data` (population.json's) as a Population, or `PopulationFileError` naming the first field
    that is missing, unknown, of another type, out of its range or at odds with the others."""
    names = [f.name for f in fields(Population)]
    if not isinstance(data, dict):
        raise PopulationFileError(f"{STATE} holds {shown(data)}: expected a JSON object with the keys {', '.join(names)}")
    required = names[:names.index("generation")]  # those after it have defaults (records made before they existed)
    if missing := [name for name in required if name not in data]:
        raise PopulationFileError(f"{STATE} has no {missing[0]}: expected a JSON object with the keys {', '.join(names)}")
    if unknown := sorted(set(data) - set(names)):
        raise PopulationFileError(f"{STATE} has an unknown key {shown(unknown[0])}: expected only {', '.join(names)}")
    values = {"generation": 0, "unqueued": {}, "stopped": [], "first_leg": None, **data}
    base = _check_fixed(values)
    _check_schedule(values, base)
    _check_members(values)
    _check_unqueued(values)
    first = values["first_leg"]
    if first is not None and not (isinstance(first, dict) and sorted(first) == sorted(LEG_KEYS) and all(
            v is None or (isinstance(v, str) and v.isprintable() and 0 < len(v) <= 2048) for v in first.values())):
        raise _bad(values, "first_leg", 'null, or a JSON object of "dashboard" and "ray_address", each null or an address')
    return Population(**{**values, "folder": str(folder)})


def _check_fixed(values: dict[str, Any]) -> PPOConfig:
    """The members' shared options, as the config they make (checked as a command line's)."""
    fixed = values["fixed"]
    if not isinstance(fixed, dict):
        raise _bad(values, "fixed", "a JSON object of training options")
    if given := [name for name in PER_MEMBER if name in fixed]:
        raise _bad(values, f"fixed.{given[0]}", f"no {given[0]} (it is set for each member)")
    if not isinstance(fixed.get("data_dir"), str) or not Path(fixed["data_dir"]).is_absolute():
        raise PopulationFileError(f"{STATE}'s fixed.data_dir is {shown(fixed.get('data_dir'))}: expected the absolute "
                                  "path of the members' data dir")
    hints = typing.get_type_hints(PPOConfig)
    for name, value in fixed.items():
        if name in hints and not _of_type(value, hints[name]):
            raise _bad(values, f"fixed.{name}", value_converter(hints[name])[1])
    try:
        base = config_from_overrides(fixed, game_exists=is_known_game)
    except ConfigError as e:  # its range, an unknown name, options at odds
        raise PopulationFileError(f"{STATE}'s fixed options: {e}") from None
    private = values["private_dashboard"]
    if not (private is True or (private is False and base.dashboard is not None)):
        raise _bad(values, "private_dashboard", "true, or false with fixed.dashboard naming the members' dashboard")
    return base


def _check_schedule(values: dict[str, Any], base: PPOConfig) -> None:
    """The segments, and what each generation explores, against the members' config `base`."""
    if values["last_update"] != base.last_update or isinstance(values["last_update"], bool):
        raise _bad(values, "last_update", f"{base.last_update}, the last update its fixed options give")
    if values["batch_size"] != base.batch_size or isinstance(values["batch_size"], bool):
        raise _bad(values, "batch_size", f"{base.batch_size}, the agent steps of an update its fixed options give")
    if not _integer(values["interval"], 1, base.last_update - 1):
        raise _bad(values, "interval", f"an integer from 1 to {base.last_update - 1}")
    generations = len(range(values["interval"], base.last_update, values["interval"])) + 1
    if not _integer(values["generation"], 0, generations):
        raise _bad(values, "generation", f"an integer from 0 to {generations}, the population's segments")
    explore = values["explore"]
    if not isinstance(explore, list) or not all(isinstance(n, str) for n in explore) or check_explored(explore) is not None:
        raise _bad(values, "explore", f"a list of distinct live hyperparameters from {', '.join(sorted(LIVE_RANGES))}")
    cpus = values["cpus_per_member"]
    if not isinstance(cpus, int | float) or isinstance(cpus, bool) or not (0 < cpus <= MAX_CPUS and math.isfinite(cpus)):
        raise _bad(values, "cpus_per_member", f"a number > 0 and ≤ {MAX_CPUS}")
    if not _integer(values["max_retries"], 0, MAX_RETRIES):
        raise _bad(values, "max_retries", f"an integer from 0 to {MAX_RETRIES}")
    if not isinstance(values["stopped"], list) or not all(isinstance(s, str) for s in values["stopped"]):
        raise _bad(values, "stopped", "a list of strings")


def _check_members(values: dict[str, Any]) -> None:
    members = values["members"]
    if not isinstance(members, list) or not 2 <= len(members) <= MAX_POPULATION:
        raise _bad(values, "members", f"a list of 2 to {MAX_POPULATION} members")
    for i, member in enumerate(members):
        if not isinstance(member, dict) or sorted(member) != ["run_uuid", "seed"]:
            raise _bad(values, f"members[{i}]", 'a JSON object with the keys "run_uuid" and "seed"')
        if not isinstance(member["run_uuid"], str) or not re.fullmatch(r"[0-9a-f]{32}", member["run_uuid"]):
            raise _bad(values, f"members[{i}].run_uuid", "the uuid of a run (32 hex digits)")
        if not _integer(member["seed"], 0, MAX_SEED):
            raise _bad(values, f"members[{i}].seed", f"an integer from 0 to {MAX_SEED}")
    if len({m["run_uuid"] for m in members}) != len(members):
        raise _bad(values, "members", "members of distinct runs (a run_uuid is listed twice)")


def _check_unqueued(values: dict[str, Any]) -> None:
    """The explored values still to be queued on the dashboard: each a member's, each in its range."""
    unqueued, members = values["unqueued"], values["members"]
    if not isinstance(unqueued, dict):
        raise _bad(values, "unqueued", "a JSON object of members' values")
    for member, changes in unqueued.items():
        if member not in {str(i) for i in range(len(members))}:
            raise PopulationFileError(f"{STATE}'s unqueued has a member {shown(member)}: expected a member's "
                                      f"number, 0 to {len(members) - 1}")
        if not isinstance(changes, dict) or not changes:
            raise _bad(values, f"unqueued.{member}", "a JSON object of live values")
        for name, value in changes.items():
            if name not in LIVE_RANGES:
                raise PopulationFileError(f"{STATE}'s unqueued.{member} has {shown(name)}: expected live "
                                          f"hyperparameters ({', '.join(sorted(LIVE_RANGES))})")
            too_large = isinstance(value, int) and abs(value) > 2**63  # past any range, and past a float
            if (problem := "a number in its range" if too_large else live_value_problem(name, value)) is not None:
                raise _bad(values, f"unqueued.{member}.{name}", problem)


def check_population_folder(folder: Path) -> None:
    """Refuse (`UnsafeRunFolder`) a population folder that is not one of plain files and folders:
    walked as a run folder is (`check_plain_folder`), but nothing in a population folder is ours to
    have two names, so any hard link is someone else's."""
    check_plain_folder(folder, lambda path: "a population folder's files have one name each")
