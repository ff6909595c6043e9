"""`breakout-ppo COMMAND [ARGS ...]`: the project's commands behind one console script (and
`python -m experiments COMMAND ...`). Each command is the module `python -m experiments.<module>`
runs; its arguments are passed on untouched and its --help names it `breakout-ppo COMMAND`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

from configs.cli import OneLineParser


class Command(NamedTuple):
    module: str  # experiments.<module> has main(argv, prog) -> exit code
    summary: str  # its line in `breakout-ppo --help`


# Written out, not read from each module's docstring: importing them all would load torch (and
# Ray) just to print the list.
COMMANDS = {
    "train": Command("experiments.breakout", "train PPO on an Atari game as a labml experiment (or --resume one)"),
    "evaluate": Command("experiments.evaluate", "play whole games with a trained policy: scores and a video"),
    "dashboard": Command("experiments.dashboard", "start the local labml dashboard"),
    "tweak": Command("experiments.tweak", "change a running experiment's live hyperparameters"),
    "benchmark": Command("experiments.benchmark", "measure env, network and training-loop speed on this machine"),
    "curves": Command("experiments.curves", "learning curves over seeds, optionally beside SB3's PPO"),
    "peer": Command("experiments.peer_sb3", "train the peer alone: SB3's PPO with rl-zoo's Atari settings, one seed"),
    "sweep": Command("experiments.sweep", "grid or random hyperparameter search on Ray"),
    "pbt": Command("experiments.pbt", "population-based training on Ray, tweaking members through the live channel"),
}


def build_parser(prog: str) -> OneLineParser:
    """Only for --help, --version and a wrong command: a known command's arguments are its own."""
    width = max(map(len, COMMANDS)) + 2
    listing = "\n".join(f"  {name:<{width}}{command.summary}" for name, command in COMMANDS.items())
    parser = OneLineParser(prog=prog, description="PPO that learns Atari games from pixels, run as labml experiments: "
                                                  "the project's commands under one name.",
                           usage="%(prog)s [-h] [--version] COMMAND [ARGS ...]",
                           epilog=f"commands:\n{listing}\n\n'{prog} COMMAND --help' lists a command's options.")
    parser.add_argument("command", metavar="COMMAND", choices=list(COMMANDS), help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "breakout-ppo") -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        parser = build_parser(prog)
        parser.parse_args(args)  # prints the help or the version, or one error line, and exits
        parser.error(f"expected the command first, one of {', '.join(COMMANDS)}")  # e.g. `-- train`
    module = importlib.import_module(COMMANDS[args[0]].module)
    code: int = module.main(args[1:], prog=f"{prog} {args[0]}")
    return code


__all__ = ["COMMANDS", "main"]

if __name__ == "__main__":
    sys.exit(main())
