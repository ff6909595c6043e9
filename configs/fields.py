"""How a config field is declared (`hp`) and the rules a single value must keep: each rule returns
the "accepted" text of the one-line refusal (`ConfigError`), or None when the value is fine."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from dataclasses import Field, dataclass, field
from typing import Any

# ---- per-field constraints -------------------------------------------------------------------
# Each returns the "accepted" text when a value is rejected, or None when it is fine.
Check = Callable[[Any], "str | None"]
ConfigValue = bool | int | float | str | None  # what a field holds


def positive(v: Any) -> str | None:
    return None if v > 0 else "a number > 0"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else "a number ≥ 0"


def unit_interval(v: Any) -> str | None:
    return None if 0 <= v <= 1 else "a number in [0, 1]"


def optional_positive(v: Any) -> str | None:
    return None if v is None or v > 0 else "a number > 0, or none"


def optional_non_negative(v: Any) -> str | None:
    return None if v is None or v >= 0 else "a number ≥ 0, or none"


def not_empty(v: object) -> str | None:
    return None if str(v).strip() else "a non-empty string"


def device_name(v: object) -> str | None:
    """How `--device` is spelled; whether that device is here is torch's to say (`ppo.devices.resolve_device`)."""
    return None if v in ("auto", "cpu", "cuda") or (isinstance(v, str) and re.fullmatch(r"cuda:[0-9]+", v)) else "auto, cpu, cuda or cuda:N"


@dataclass(frozen=True)
class Within:
    """A value from `low` to `high` (above `low` with `low_open`), or none where `optional`: every
    number a run counts, sizes or waits by has an upper end too, one the machine and the arithmetic
    can take (a count past 64 bits, a thread pool of 100,000, a buffer larger than the memory), so a
    value past it is one line before anything starts. --help shows the range (`shown`)."""

    low: float
    high: float
    low_open: bool = False
    optional: bool = False
    shown: str = field(init=False, compare=False)  # the range as --help and the refusal write it: `1 to 256`, `> 0 and ≤ 86400`

    def __post_init__(self) -> None:
        # Integers grouped as Python writes them (10_000_000), which the command line reads back too.
        low, high = (f"{x:_}" if isinstance(x, int) else f"{x:g}" for x in (self.low, self.high))
        object.__setattr__(self, "shown", f"> {low} and ≤ {high}" if self.low_open else f"{low} to {high}")

    def __call__(self, v: Any) -> str | None:
        if v is None and self.optional:
            return None
        if (self.low < v if self.low_open else self.low <= v) and v <= self.high:
            return None
        integral = isinstance(self.low, int) and isinstance(self.high, int)
        kind = "an integer" if integral else "a number"
        return f"{kind} {'' if self.low_open else 'from '}{self.shown}" + (", or none" if self.optional else "")


MAX_SEED = 2**63 - 1  # seeds are kept as int64 (numpy, torch)
# Agent steps of a run: far past any Atari budget (10M to 200M), and a count every int64 and every
# float64 (exact to 2**53) holds, whatever it is multiplied by in between.
MAX_ENV_STEPS = 10**13
MAX_UPDATES = 10**9
MAX_WORKERS = 4096  # worker processes or Ray actors of one run; a local run is held to its cores too (configs/ppo.py)
MAX_THREADS = 256  # torch's thread pools: far past any machine's cores (100,000 crashes the process)
MAX_PATH = 4096  # Linux's PATH_MAX; one name in it at most 255 bytes (NAME_MAX)

# Greedy (argmax) evaluation takes a uniformly random action with this probability. Without
# sticky actions the ALE is deterministic, so a pure argmax policy can lock into a loop (the
# paddle parked while the ball bounces in a cycle that never scores) and N greedy games that draw
# the same no-op count are identical. A little ε breaks both; the Atari literature evaluates
# with ε between 0.001 (Rainbow and later) and 0.05 (Mnih et al. 2015). 0.01 barely moves
# Breakout scores. Sampled play is already stochastic and uses ε = 0 by default. Here, not in
# ppo/evaluation, so that `evaluate --help` shows it without loading torch.
DEFAULT_GREEDY_EPSILON = 0.01


def folder_path(v: object) -> str | None:
    """A path the run can create: not empty, no NUL, at most MAX_PATH bytes, each name ≤ 255 bytes."""
    text = str(v)
    if not text.strip() or "\0" in text or len(text.encode()) > MAX_PATH or any(len(part.encode()) > 255 for part in text.split("/")):
        return f"a folder path (not empty, at most {MAX_PATH} bytes, each name in it at most 255)"
    return None


PRECISIONS = ("auto", "fp32", "bf16", "bf16-emulated", "bf16-then-fp32")
# game.vector.BACKENDS, spelled here too: configs imports nothing of ours (tests/test_architecture.py keeps them equal)
BACKENDS = ("local", "ray", "serial")
# game.atari.RELAUNCHES, spelled here too: configs imports nothing of ours (tests/test_architecture.py keeps them equal)
RELAUNCHES = ("fire", "noop-fire-right")


def precision_name(v: object) -> str | None:
    """How `--precision` is spelled; whether this machine has bf16 is torch's to say (`ppo.devices`)."""
    return None if v in PRECISIONS else "auto, fp32, bf16, bf16-emulated or bf16-then-fp32"


def folder_name(v: object) -> str | None:
    # The name is a folder under data_dir: one plain path component, so `../x` or `/etc` cannot
    # put a run anywhere else.
    return None if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", str(v)) else (
        "a folder name of at most 100 letters, digits, '.', '_' or '-', starting with a letter or digit (no '/', no '..')")


def live_value_problem_in(value: object, low: float, high: float, integral: bool) -> str | None:
    """THE live-value rule: what is wrong with `value` for a live hyperparameter in [low, high]
    (integral: an integer), as the "expected" text, or None when it may be applied. The trainer,
    the checkpoint, a resume and the dashboard all decide with this one function."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "an integer" if integral else "a number"
    try:
        value = float(value)  # any real (a numpy scalar too), compared as a float
    except OverflowError:  # an integer past any float: past every range too
        return f"a value in [{low:g}, {high:g}]"
    if not math.isfinite(value):
        return "a finite number"
    if integral and value != int(value):
        return "an integer"
    if not low <= value <= high:
        return f"a value in [{low:g}, {high:g}]"
    return None


def one_of(*choices: str) -> Check:
    def check(v: object) -> str | None:
        return None if v in choices else f"one of {', '.join(choices)}"
    return check


def braced(choices: tuple[str, ...]) -> str:
    """`{a,b,c}`: how --help writes the placeholder of an option with a fixed set of values."""
    return "{" + ",".join(choices) + "}"


def hp(default: Any, help: str, check: Check | None = None, live: tuple[float, float] | None = None,
       run_option: bool = False, metavar: str | None = None) -> Any:
    """A config field. `live=(low, high)` makes it a dynamic hyperparameter, changeable while the
    run goes; `run_option` marks how/where to run rather than what to learn (allowed to differ
    on `--resume`); `metavar` is its placeholder in --help when the type's (INT, FLOAT, …) says
    too little. A field whose default is none says in `help` what none means (the command line
    adds "(default: …)" for every other default)."""
    return field(default=default, metadata={"help": help, "check": check, "live": live, "run_option": run_option,
                                            "metavar": metavar})


def check_field(f: Field[Any], value: object) -> None:
    """`ConfigError` for a value the field `f` (a `PPOConfig` field, declared by `hp`) does not
    accept on its own: a finite number, its rule, and a live hyperparameter's range."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f.name, value, "a finite number")
    check = f.metadata["check"]
    if check is not None and (problem := check(value)) is not None:
        raise ConfigError(f.name, value, problem)
    if f.metadata["live"] is not None:
        low, high = f.metadata["live"]
        if (problem := live_value_problem_in(value, low, high, integral(f))) is not None:
            raise ConfigError(f.name, value, problem)


def integral(f: Field[Any]) -> bool:
    """Whether the field `f` holds an integer, as its default does (`epochs`, not `learning_rate`)."""
    return isinstance(f.default, int) and not isinstance(f.default, bool)


class ConfigError(ValueError):
    """A rejected value: names the option, the value, and what is accepted."""

    def __init__(self, name: str, value: object, accepted: str) -> None:
        self.option = "--" + name.replace("_", "-")
        self.value = value
        self.accepted = accepted
        if value is None:
            shown = "none"
        elif isinstance(value, str) and (not value.strip() or value != value.strip() or not value.isprintable()):
            shown = repr(value)  # '' or '\n' must stay visible, and the message one line
        else:
            shown = str(value)
        super().__init__(f"{self.option} {shown}: expected {accepted}")
