"""The command line, generated from `PPOConfig`: every field is `--name VALUE` (dashes or
underscores), `--help` lists them with their defaults, and a bad value is one line and exit 2."""

from __future__ import annotations

import argparse
import math
import re
import sys
import typing
from collections.abc import Sequence
from typing import Any, NoReturn

from configs.ppo import ConfigError, PPOConfig, config_fields, validate

USAGE_ERROR = 2  # the exit code of a bad command line, as argparse uses it


def usage_error(message: str, prog: str | None = None) -> NoReturn:
    """Print one `error:` line on stderr (starting with `prog: ` when given) and exit with code 2."""
    prefix = f"{prog}: " if prog else ""
    print(f"{prefix}error: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


def fail(message: str) -> NoReturn:
    """`usage_error` without a program name: the form the training commands print."""
    usage_error(message)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is a single `error:` line (no usage dump) and exit code 2.

    With `name_in_errors=True` the line starts with the program's name (``tweak: error: ...``),
    as the dashboard's commands print it; `fail` reports the checks done after parsing alike.
    """

    def __init__(self, *args: Any, name_in_errors: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name_in_errors = name_in_errors
        # argparse only takes "-5" or "-.5" as values; "-1e-4" would be read as an unknown flag.
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.I)

    def error(self, message: str) -> NoReturn:
        self.fail(message)

    def fail(self, message: str) -> NoReturn:
        """Report a bad value found after parsing the way argparse's own errors are reported."""
        usage_error(message, self.prog if self.name_in_errors else None)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


def _parse_finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def value_converter(annotation: Any) -> tuple[typing.Callable[[str], Any], str]:
    """(function parsing one command-line string, what it accepts) for a field's type."""
    args = typing.get_args(annotation)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), annotation) if args else annotation
    parse: typing.Callable[[str], Any]
    if base is bool:
        parse, accepted = _parse_bool, "true or false"
    elif base is int:
        parse, accepted = int, "an integer"
    elif base is float:
        parse, accepted = _parse_finite_float, "a finite number"
    else:
        parse, accepted = str, "a string"

    def convert(text: str) -> Any:
        if optional and text.strip().lower() in ("none", "null"):
            return None
        return parse(text)

    return convert, accepted + (" or none" if optional else "")


def build_parser(prog: str, description: str) -> OneLineParser:
    parser = OneLineParser(prog=prog, description=description, allow_abbrev=False,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    group = parser.add_argument_group("hyperparameters and run options (from configs/ppo.py)")
    for f in config_fields():
        dashed, underscored = "--" + f.name.replace("_", "-"), "--" + f.name
        flags = [dashed] if dashed == underscored else [dashed, underscored]
        live = " [live: changeable while running]" if f.metadata["live"] else ""
        group.add_argument(*flags, dest=f.name, metavar="VALUE", default=argparse.SUPPRESS,
                           help=f"{f.metadata['help']}{live} (default: {f.default})")
    return parser


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields given on the command line, converted to their types (ConfigError if not)."""
    hints = typing.get_type_hints(PPOConfig)
    values: dict[str, Any] = {}
    for f in config_fields():
        if f.name in vars(args):
            convert, accepted = value_converter(hints[f.name])
            text = getattr(args, f.name)
            try:
                values[f.name] = convert(text)
            except ValueError:
                raise ConfigError(f.name, text, accepted) from None
    if "updates" in values and "total_env_steps" in values and values["updates"] is not None:
        raise ConfigError("updates", values["updates"], "either --updates or --total-env-steps, not both")
    return values


def config_from_overrides(overrides: dict[str, Any], base: PPOConfig | None = None,
                          game_exists: typing.Callable[[str], bool] | None = None) -> PPOConfig:
    """Apply overrides to `base` (defaults if None) and validate the result."""
    base_values = (base or PPOConfig()).to_dict()
    base_values.update(overrides)
    return validate(PPOConfig.from_dict(base_values), game_exists)


def parse_config(argv: Sequence[str] | None, prog: str, description: str,
                 add_arguments: typing.Callable[[OneLineParser], None] | None = None,
                 game_exists: typing.Callable[[str], bool] | None = None) -> tuple[PPOConfig, argparse.Namespace, dict[str, Any]]:
    """Parse, convert and validate; exits with one line on any bad input."""
    parser = build_parser(prog, description)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        overrides = overrides_from_args(args)
        config = config_from_overrides(overrides, game_exists=game_exists)
    except ConfigError as e:
        fail(str(e))
    return config, args, overrides


__all__ = [
    "USAGE_ERROR",
    "OneLineParser",
    "build_parser",
    "config_from_overrides",
    "fail",
    "overrides_from_args",
    "parse_config",
    "usage_error",
    "value_converter",
]
