"""The one shape of every command's refusal, `error: --option VALUE: expected WHAT IS ACCEPTED`,
and argparse's own messages rewritten into it (`configs.cli.OneLineParser` applies them)."""

from __future__ import annotations

import re
import sys
import typing
from typing import NoReturn

from configs.terminal import escaped

USAGE_ERROR = 2  # the exit code of a bad command line, as argparse uses it


def shown(text: str) -> str:
    """A value as an error line shows it: as typed, or quoted where that would hide it ('' or a newline)."""
    return text if text.strip() == text and text.isprintable() and text else repr(text)


def error_line(message: str) -> str:
    """The one shape of every command's refusal and error, `error: MESSAGE`, where MESSAGE names
    what was wrong the way a bad option does: `--option VALUE: expected WHAT IS ACCEPTED`. The
    message may quote a file, a checkpoint or a dashboard: its control characters are escaped."""
    return f"error: {escaped(message)}"


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    """Print `error_line(message)` on stderr and exit: code 2 for bad input (argparse's), 1 for a
    failure found once the input was accepted (a dashboard that answers with a server error)."""
    print(error_line(message), file=sys.stderr, flush=True)
    raise SystemExit(code)


def bad_value(option: str, value: object, accepted: str) -> NoReturn:
    """The one line for a value an option does not take: `error: OPTION VALUE: expected ACCEPTED`."""
    fail(f"{option} {value}: expected {accepted}")


def _invalid_choice(m: re.Match[str]) -> str:
    choices = m[3].replace("'", "")  # quoted or bare, as the Python version writes them
    return f"{m[1]} {shown(m[2])}: expected one of {choices}"


def _invalid_number(m: re.Match[str]) -> str:
    return f"{m[1]} {shown(m[3])}: expected {'an integer' if m[2] == 'int' else 'a number'}"


# argparse's own messages, in this project's shape (`OneLineParser.error`): (pattern, replacement).
ARGPARSE_MESSAGES: tuple[tuple[str, str | typing.Callable[[re.Match[str]], str]], ...] = (
    # `int_in`/`float_in`: "argument --seeds: x: expected …" → "--seeds x: expected …"
    (r"^argument ([^:\s/]+)(?:/\S+)?: (?=\S.*: expected )", r"\1 "),
    # "argument --peer: invalid choice: 'x' (choose from 'none', 'sb3')" → "--peer x: expected one of none, sb3"
    (r"^argument ([^:\s/]+)(?:/\S+)?: invalid choice: '(.*)' \(choose from (.*)\)$", _invalid_choice),
    # "argument --population: invalid int value: 'x'" → "--population x: expected an integer"
    (r"^argument ([^:\s/]+)(?:/\S+)?: invalid (int|float) value: '(.*)'$", _invalid_number),
    # "argument --games: expected one argument" → "--games: expected a value after it"
    (r"^argument ([^:\s/]+)(?:/\S+)?: expected (?:one|at least one) argument$", r"\1: expected a value after it"),
    # "argument --sample: not allowed with argument --greedy" → "--sample: expected either --greedy or --sample, not both"
    (r"^argument ([^:\s/]+)(?:/\S+)?: not allowed with argument (\S+)$", r"\1: expected either \2 or \1, not both"),
    # "the following arguments are required: RUN_UUID" → "RUN_UUID: expected a value, none given"
    (r"^the following arguments are required: (.*)$", r"\1: expected a value, none given"),
    # anything else argparse says of one argument: "argument --x: …" → "--x: …"
    (r"^argument ([^:\s/]+)(?:/\S+)?: ", r"\1: "),
)

