"""Population-based training on Ray: `python -m experiments.pbt --help`.

N runs of this project (the members) train side by side; every `--interval` updates the worst
quarter copies the learner of the best quarter (exploit) and is sent the copied live
hyperparameters, perturbed, through the dashboard's live channel (explore), as a person's tweak
would be. See docs/pbt.md.
"""

from experiments.pbt.cli import main

__all__ = ["main"]
