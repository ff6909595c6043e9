"""A sweep's search space: a grid and/or random draws of hyperparameters, from the command line
or a YAML file, each value checked as its config field's type."""

from __future__ import annotations

import argparse
import difflib
import itertools
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from configs.cli import value_converter
from configs.fields import MAX_SEED, ConfigValue
from configs.ppo import FIELDS, PPOConfig

DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")


class SweepError(ValueError):
    """Bad sweep input: one line, exit 2."""


# Trials of one sweep: each is a whole training run, so ten thousand is already months of machine
# time. The grid's size is worked out from its lists before any point is made (a grid of 10^8
# points, or samples: 1e12, is refused in one line rather than filling the memory or never ending).
MAX_TRIALS = 10_000


def whole_number(value: Any, where: str, low: int, high: int) -> int:
    """`value` (a YAML scalar or command-line text) as an integer from `low` to `high`, else SweepError."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # YAML reads 1e3 as a float
    try:
        number = int(value) if not isinstance(value, (float, bool)) else None
    except (TypeError, ValueError):
        number = None
    if number is None or not low <= number <= high:
        raise SweepError(f"{where} {value!r}: expected an integer from {low:_} to {high:_}")
    return number


def _check_name(name: str, where: str) -> str:
    """`name` when it is a hyperparameter's; else SweepError naming `where` it was given, with the
    nearest name (`learnin_rate` → learning_rate), as the command line answers an unknown option."""
    fields = [f.name for f in FIELDS]
    if name not in fields:
        guess = next(iter(difflib.get_close_matches(name, fields, n=1)), None)
        hint = f"; did you mean {guess}?" if guess else " (see python -m experiments.breakout --help)"
        raise SweepError(f"{where}: expected the name of a hyperparameter ({name!r} is none){hint}")
    return name


def _field_value(name: str, value: object) -> ConfigValue:
    """`value` (text, or a YAML scalar) as field `name`'s type; SweepError names what is wrong."""
    _check_name(name, f"{name}={value}")
    convert, accepted = value_converter(typing.get_type_hints(PPOConfig)[name])
    try:
        return convert(str(value))
    except ValueError:
        raise SweepError(f"{name}={value}: expected {accepted}") from None


def _split_assignment(text: str, option: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise SweepError(f"{option} {text}: expected NAME=VALUE")
    return name.strip().replace("-", "_"), value.strip()


@dataclass
class Distribution:
    kind: str
    args: list[Any]

    def sample(self, rng: np.random.Generator) -> Any:
        if self.kind == "uniform":
            return float(rng.uniform(self.args[0], self.args[1]))
        if self.kind == "loguniform":
            return float(math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1]))))
        if self.kind == "randint":
            return int(rng.integers(self.args[0], self.args[1] + 1))
        return self.args[int(rng.integers(len(self.args)))]


def parse_distribution(name: str, text: str) -> Distribution:
    """`uniform:LOW:HIGH`, `loguniform:LOW:HIGH` (LOW > 0), `randint:LOW:HIGH` (inclusive), `choice:A,B,…`."""
    kind, _, rest = str(text).partition(":")
    where = f"--random {name}={text}"
    if kind not in DISTRIBUTIONS:
        raise SweepError(f"{where}: expected one of {', '.join(k + ':…' for k in DISTRIBUTIONS)}")
    if kind == "choice":
        choices = [_field_value(name, v.strip()) for v in rest.split(",") if v.strip()]
        if not choices:
            raise SweepError(f"{where}: expected choice:A,B,…")
        return Distribution(kind, choices)
    try:
        low, high = (int(p) if kind == "randint" else float(p) for p in rest.split(":"))
    except ValueError:
        raise SweepError(f"{where}: expected {kind}:LOW:HIGH with numbers") from None
    if not (math.isfinite(low) and math.isfinite(high) and low <= high) or (kind == "loguniform" and low <= 0):
        raise SweepError(f"{where}: expected LOW ≤ HIGH{' and LOW > 0' if kind == 'loguniform' else ''}")
    return Distribution(kind, [low, high])


@dataclass
class SearchSpace:
    grid: dict[str, list[Any]]
    random: dict[str, Distribution]
    samples: int
    seed: int

    def trials(self) -> list[dict[str, Any]]:
        """Every grid point, `samples` times, each with its own random draws (Ray Tune's rule)."""
        rng = np.random.default_rng(self.seed)
        names = list(self.grid)
        points = [dict(zip(names, values, strict=True)) for values in itertools.product(*self.grid.values())]
        trials = []
        for _ in range(self.samples):
            for point in points:
                drawn = {name: _field_value(name, d.sample(rng)) for name, d in self.random.items()}
                trials.append({**point, **drawn})
        return trials


def read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # a labml dependency

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise SweepError(f"--config {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise SweepError(f"--config {path}: not UTF-8 text (byte {e.start:,} cannot be decoded)") from None
    except yaml.YAMLError as e:
        raise SweepError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    data = data or {}
    unknown = set(data) - {"grid", "random", "samples", "seed", "fixed"} if isinstance(data, dict) else {"(not a mapping)"}
    if unknown:
        raise SweepError(f"--config {path}: unknown key {sorted(map(str, unknown))[0]!r} (expected grid, random, samples, seed, fixed)")
    for key in ("grid", "random", "fixed"):
        if not isinstance(data.get(key) or {}, dict):
            raise SweepError(f"--config {path}: {key} is a {type(data[key]).__name__}, expected a mapping of NAME: VALUES")
    return data


def search_space(args: argparse.Namespace) -> tuple[SearchSpace, dict[str, Any]]:
    """(the space, fixed overrides from the YAML file); the command line wins over the file."""
    if args.config is not None and not args.config.strip():
        raise SweepError(f"--config {args.config!r}: expected the path of a YAML file")
    data = read_yaml(Path(args.config)) if args.config is not None else {}
    grid: dict[str, list[Any]] = {}
    for name, values in (data.get("grid") or {}).items():
        _check_name(str(name), f"--config {args.config}: grid")
        values = values if isinstance(values, list) else str(values).split(",")
        grid[name] = [_field_value(name, v) for v in values]
    random = {_check_name(str(name), f"--config {args.config}: random"): parse_distribution(name, text)
              for name, text in (data.get("random") or {}).items()}
    for text in args.grid:
        name, values = _split_assignment(text, "--grid")
        _check_name(name, f"--grid {text}")
        grid[name] = [_field_value(name, v.strip()) for v in values.split(",") if v.strip()]
        random.pop(name, None)
    for text in args.random:
        name, spec = _split_assignment(text, "--random")
        _check_name(name, f"--random {text}")
        random[name] = parse_distribution(name, spec)
        grid.pop(name, None)
    for name, values in grid.items():
        if not values:
            raise SweepError(f"--grid {name}: expected at least one value")
    if not grid and not random:
        raise SweepError("nothing to sweep: give --grid NAME=V1,V2 and/or --random NAME=DIST (or --config FILE)")
    samples = args.samples if args.samples is not None else whole_number(data.get("samples", 1), "--config samples:", 1, MAX_TRIALS)
    seed = args.sweep_seed if args.sweep_seed is not None else whole_number(data.get("seed", 0), "--config seed:", 0, MAX_SEED)
    size = math.prod(len(values) for values in grid.values()) * samples  # the trials, counted before any is made
    if size > MAX_TRIALS:
        shape = " × ".join([*(f"{len(v)} {name}" for name, v in grid.items()), f"{samples} samples"])
        raise SweepError(f"the sweep has {size:,} trials ({shape}); expected at most {MAX_TRIALS:,}")
    fixed = {_check_name(str(name), f"--config {args.config}: fixed"): _field_value(name, v) for name, v in (data.get("fixed") or {}).items()}
    return SearchSpace(grid, random, samples, seed), fixed
