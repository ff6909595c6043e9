"""Shared bits of the command-line entry points: one-line usage errors with exit code 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

USAGE_ERROR = 2


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is a single line on stderr (no usage dump), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def usage_error(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(USAGE_ERROR)
