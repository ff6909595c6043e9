"""`python -m experiments COMMAND [ARGS ...]`: the same as the `breakout-ppo` console script."""

import sys

from experiments.commands import main

if __name__ == "__main__":  # not when a spawned worker re-imports the main module
    sys.exit(main(prog="python -m experiments"))
