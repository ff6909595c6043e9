"""The command line, generated from `PPOConfig`: every field is `--name VALUE` (dashes or
underscores), `--help` lists them by section with a typed placeholder and their defaults, and a
bad value or an unknown option is one line and exit 2.

Every command of the project parses with `OneLineParser`, so all of them share: the one-line
errors, `--version`, underscores accepted for dashes, "did you mean" for a misspelt option.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
import typing
from collections.abc import Sequence
from typing import Any, NoReturn

from configs.fields import ConfigValue, Within, check_field
from configs.launch import launch_config
from configs.ppo import FIELDS, SECTION_OF, SECTIONS, ConfigError, PPOConfig
from configs.refusals import ARGPARSE_MESSAGES, fail, shown
from configs.version import NAME, VERSION

# What other PPO code (SB3, CleanRL, baselines) calls some options: difflib's nearest spelling
# would not find `--learning-rate` from `--lr`, so these are looked up first.
ALIASES = {
    "lr": "learning-rate", "learning-rate-annealing": "anneal-learning-rate", "anneal-lr": "anneal-learning-rate",
    "ent-coef": "entropy-coef", "vf-coef": "value-coef", "clip-param": "clip-range", "clip-coef": "clip-range",
    "clip-vloss": "clip-value-loss", "cliprange": "clip-range", "lam": "gae-lambda", "gae": "gae-lambda",
    "n-steps": "worker-steps", "num-steps": "worker-steps", "nsteps": "worker-steps", "n-epochs": "epochs",
    "update-epochs": "epochs", "noptepochs": "epochs", "num-minibatches": "minibatches", "nminibatches": "minibatches",
    "n-envs": "n-workers", "num-envs": "n-workers", "num-workers": "n-workers", "total-timesteps": "total-env-steps",
    "env": "game", "env-id": "game", "eps": "adam-eps", "norm-adv": "normalize-advantages", "max-grad": "max-grad-norm",
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's layout with a wider option column (`--learning-rate FLOAT` and its help on one
    line). Description and epilog paragraphs are wrapped to the terminal, except one holding a
    list or indented lines (examples), which is kept as written."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 32, width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
            if re.search(r"^(\s|\d+\.\s|[-*]\s)", paragraph, re.M):
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                paragraphs.append(super()._fill_text(paragraph, width, indent))
        return "\n\n".join(paragraphs)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is a single `error:` line (no usage dump) and exit code 2;
    every option may also be spelt with underscores (`--learning_rate`, not shown in --help); an
    unknown option is answered with the nearest known one; `--version` prints the version.

    Every error is one `error_line`, as every check done after parsing reports (`fail`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # `--lr` must not quietly mean some `--lr…` option
        super().__init__(*args, **kwargs)
        # argparse only takes "-5" or "-.5" as values; "-1e-4" would be read as an unknown flag.
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.I)
        self.add_argument("--version", action="version", version=f"{NAME} {VERSION}", help="print the version and exit")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:  # type: ignore[override]
        return super().parse_known_args(self._dashed(sys.argv[1:] if args is None else args), namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(self._unrecognized(unknown))
        return parsed

    def _options(self) -> list[str]:
        return [option for option in self._option_string_actions if option.startswith("--")]

    def _dashed(self, args: Sequence[str]) -> list[str]:
        """`--learning_rate[=V]` → `--learning-rate[=V]` where that is an option (values and
        everything after a bare `--` are left alone)."""
        options, out = set(self._options()), list(args)
        for i, arg in enumerate(out):
            if arg == "--":
                break
            name, sep, value = arg.partition("=")
            if name.startswith("--") and name not in options and (dashed := "--" + name[2:].replace("_", "-")) in options:
                out[i] = dashed + sep + value
        return out

    def _unrecognized(self, unknown: list[str]) -> str:
        """argparse's message, plus the option probably meant: `--lr` → `--learning-rate`."""
        message = f"unrecognized arguments: {' '.join(unknown)}"
        first = next((arg.partition("=")[0] for arg in unknown if arg.startswith("-") and not self._negative_number_matcher.match(arg)), None)
        if first is None:
            return message
        key = first.lstrip("-").replace("_", "-").lower()
        options = self._options()
        guess = "--" + ALIASES[key] if key in ALIASES and "--" + ALIASES[key] in options else None
        guess = guess or next(iter(difflib.get_close_matches("--" + key, options, n=1)), None)
        return f"{message}; did you mean {guess}?" if guess else message

    def error(self, message: str) -> NoReturn:
        for pattern, replacement in ARGPARSE_MESSAGES:
            message = re.sub(pattern, replacement, message)
        self.fail(message)

    def fail(self, message: str) -> NoReturn:
        """Report a bad value found after parsing the way argparse's own errors are reported."""
        fail(message)


def int_in(low: int, high: int) -> typing.Callable[[str], int]:
    """An argparse `type`: an integer from `low` to `high`, else "--option TEXT: expected an
    integer from LOW to HIGH" (one line, exit 2). Every integer option of every command has such a
    range: one past what the machine or the arithmetic can take is refused before anything starts."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{shown(text)}: expected an integer from {low:_} to {high:_}")
        return value
    return parse


def finite_number(text: str, low: float = -math.inf, high: float = math.inf, low_open: bool = False) -> float | None:
    """`text` as a finite number in [low, high] (or (low, high] with `low_open`), or None: the one
    reading of every number a command is given (each says in its own refusal what it accepts)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not (math.isfinite(value) and (low < value if low_open else low <= value) and value <= high):
        return None
    return value


def float_in(low: float, high: float, low_open: bool = False) -> typing.Callable[[str], float]:
    """An argparse `type`: a finite number in [low, high] (or (low, high] with `low_open`)."""
    def parse(text: str) -> float:
        if (value := finite_number(text, low, high, low_open)) is None:
            raise argparse.ArgumentTypeError(f"{shown(text)}: expected a number {'>' if low_open else '≥'} {low:g} and ≤ {high:g}")
        return value
    return parse


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


def _parse_finite_float(text: str) -> float:
    if (value := finite_number(text)) is None:
        raise ValueError(text)
    return value


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """(the type, whether none is allowed too) of `int | None`-style annotations."""
    args = typing.get_args(annotation)
    base = next((a for a in args if a is not type(None)), annotation) if args else annotation
    return base, type(None) in args


def placeholder(annotation: Any) -> str:
    """The --help placeholder of a field's type: `--seed INT`, `--clip-rewards {true,false}`."""
    base, _ = _base_type(annotation)
    return {bool: "{true,false}", int: "INT", float: "FLOAT"}.get(base, "STR")


def shown_default(value: object) -> str:
    """A default as it is typed on the command line: `true`, not `True`."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def value_converter(annotation: Any) -> tuple[typing.Callable[[str], ConfigValue], str]:
    """(function parsing one command-line string, what it accepts) for a field's type."""
    base, optional = _base_type(annotation)
    parse: typing.Callable[[str], ConfigValue]
    if base is bool:
        parse, accepted = _parse_bool, "true or false"
    elif base is int:
        parse, accepted = int, "an integer"
    elif base is float:
        parse, accepted = _parse_finite_float, "a finite number"
    else:
        parse, accepted = str, "a string"

    def convert(text: str) -> ConfigValue:
        if optional and text.strip().lower() in ("none", "null"):
            return None
        return parse(text)

    return convert, accepted + (" or none" if optional else "")


def build_parser(prog: str, description: str) -> OneLineParser:
    """A parser with every `PPOConfig` field as an option, grouped by `configs.ppo.SECTIONS`; an
    option not given is absent from the parsed namespace (so only what was typed overrides)."""
    parser = OneLineParser(prog=prog, description=description, usage="%(prog)s [-h] [--version] [--OPTION VALUE ...]",
                           epilog="[live]: can also be changed while the run goes (python -m experiments.tweak, or the dashboard).\n\n"
                                  "Any option may be spelt with underscores instead of dashes; true/false also take yes/no, 1/0.")
    hints = typing.get_type_hints(PPOConfig)
    groups = {title: parser.add_argument_group(title) for title in SECTIONS}
    for f in FIELDS:
        live = " [live]" if f.metadata["live"] else ""
        check = f.metadata["check"]
        shown_range = f" [{check.shown}]" if isinstance(check, Within) else ""  # every number's range, as validate checks it
        text, own_default, default_note = f.metadata["help"].partition(" (default:")  # a none default's note stays last
        # A none default is explained by the field's own help ("(default: none, never)").
        default = "" if f.default is None else f" (default: {shown_default(f.default)})"
        groups[SECTION_OF[f.name]].add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=argparse.SUPPRESS,
                           metavar=f.metadata["metavar"] or placeholder(hints[f.name]),
                                                   help=f"{text}{shown_range}{own_default}{default_note}{live}{default}")
    return parser


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields given on the command line, converted to their types (ConfigError if not)."""
    hints = typing.get_type_hints(PPOConfig)
    values: dict[str, Any] = {}
    for f in FIELDS:
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


def spell_game(overrides: dict[str, Any], canonical_game: typing.Callable[[str], str | None] | None) -> dict[str, Any]:
    """`overrides` with `--game pong` spelt as the emulator spells it (`Pong`), so the config, the
    checkpoint and a `--resume`'s comparison with the saved config all hold the one spelling. An
    unknown name is left as typed, for validation to name it."""
    if canonical_game is None or "game" not in overrides:
        return overrides
    return {**overrides, "game": canonical_game(overrides["game"]) or overrides["game"]}


def parse_overrides(argv: Sequence[str] | None, prog: str, description: str,
                    add_arguments: typing.Callable[[OneLineParser], None] | None = None,
                    canonical_game: typing.Callable[[str], str | None] | None = None) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The command line's config values, each converted and checked on its own (what it is combined
    with is checked where the config is made: configs/launch.py); exits with one line on a bad one.
    `canonical_game` is the game package's spelling of a game name, passed in because this package
    imports nothing of the emulator's."""
    parser = build_parser(prog, description)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        overrides = spell_game(overrides_from_args(args), canonical_game)
        for name, value in overrides.items():
            check_field(PPOConfig.__dataclass_fields__[name], value)
    except ConfigError as e:
        fail(str(e))
    return args, overrides


def parse_config(argv: Sequence[str] | None, prog: str, description: str,
                 add_arguments: typing.Callable[[OneLineParser], None] | None = None,
                 canonical_game: typing.Callable[[str], str | None] | None = None,
                 cores: int | None = None) -> tuple[PPOConfig, argparse.Namespace, dict[str, Any]]:
    """Parse, then make the config (with the games grouped by `cores` unless None or chosen); exits
    with one line on any bad input. With `canonical_game`, the game must be one it knows, spelled
    as it spells it (as the command line's is); without, the game's name is not checked."""
    args, overrides = parse_overrides(argv, prog, description, add_arguments, canonical_game)
    game_exists = None if canonical_game is None else lambda game: canonical_game(game) == game
    try:
        config, _ = launch_config(overrides, cores, game_exists=game_exists)
    except ConfigError as e:
        fail(str(e))
    return config, args, overrides


def docstring_help(doc: str | None) -> tuple[str, str]:
    """(description, epilog) for --help from a module docstring written in Markdown: its first
    paragraph, then the rest, with the markup (`code`, **bold**, # headings, ``` fences) dropped."""
    description, _, epilog = (doc or "").strip().partition("\n\n")
    # "Learning curves over seeds: `python -m experiments.curves --help`." points at the command
    # the reader is already running (maybe as `breakout-ppo curves`): --help leaves that out.
    description = re.sub(r":\s*`python -m [^`]*`\.?$", ".", " ".join(description.split()))
    return _plain(description), _plain(epilog)


def _plain(markdown: str) -> str:
    lines = (re.sub(r"^\s*#+\s*", "", line) for line in markdown.splitlines() if not line.strip().startswith("```"))
    text = "\n".join(lines)
    return re.sub(r"\*\*(.+?)\*\*|\*(\S[^*]*?)\*|`([^`]*)`", lambda m: next(g for g in m.groups() if g is not None), text)

