"""Population-based training on Ray: `python -m experiments.pbt --help`.

N runs of this project (the members) train side by side; every `--interval` updates the worst
quarter copies the learner of the best quarter (exploit) and is sent the copied live
hyperparameters, perturbed, through the dashboard's live channel (explore), as a person's tweak
would be. See docs/pbt.md.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    # Imported when called: a member's process imports this package to reach its task
    # (population.py), and a member is a training run, which loads nothing of the dashboard.
    from experiments.pbt.cli import main as driver

    return driver(argv) if prog is None else driver(argv, prog)


__all__ = ["main"]
