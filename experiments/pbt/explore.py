"""Exploit and explore: what a member takes from a better one, and how its values are perturbed.

Exploit rewrites the member's own newest checkpoint with ppo/resume_point.py's `with_learner_of`:
the donor's network weights, Adam state and schedule position (update and agent steps, which set
the annealing) replace its own; its games (emulator states, seeds, the games.csv rows they
counted), its random streams and its live values stay its own. The donor's live values,
perturbed, become the member's (`exploit` says how they travel), so the member's page and
updates.csv show the change as they show a person's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from configs.fields import integral
from configs.ppo import LIVE_RANGES, PPOConfig, live_value_problem

# The live values updates.csv records (learning_rate and clip_range as annealed, epochs as
# epochs_done), so each change a member is sent shows in its run folder as well as on its page.
DEFAULT_EXPLORED = ("learning_rate", "clip_range", "epochs")
FACTORS = (0.8, 1.2)  # Jaderberg et al. 2017's perturbation


def check_explored(names: list[str]) -> str | None:
    """What is wrong with `names` as the hyperparameters to explore (the accepted text), or None."""
    live = sorted(LIVE_RANGES)
    if not names or any(name not in live for name in names) or len(set(names)) != len(names):
        return f"distinct live hyperparameters, comma-separated, from {', '.join(live)}"
    return None


def perturbed(values: dict[str, Any], names: list[str], rng: np.random.Generator) -> dict[str, Any]:
    """Each of `names` in `values` times 0.8 or 1.2 (an integer moves by at least 1), clipped into
    its range in configs/ppo.py, and checked there as the trainer checks what it receives."""
    changes: dict[str, Any] = {}
    for name in names:
        low, high = LIVE_RANGES[name]
        value, factor = values[name], FACTORS[int(rng.integers(len(FACTORS)))]
        if integral(PPOConfig.__dataclass_fields__[name]):
            new: Any = round(value * factor)
            if new == value:
                new = value + (1 if factor > 1 else -1)
            new = int(min(max(new, low), high))
        else:
            new = min(max(float(f"{value * factor:.6g}"), low), high)
        if (problem := live_value_problem(name, new)) is not None:  # a bug here, never a member's input
            raise AssertionError(f"perturbed {name} = {new!r}: expected {problem}")
        changes[name] = new
    return changes


def exploit(member_dir: Path, donor_dir: Path, names: list[str], rng: np.random.Generator) -> dict[str, Any]:
    """Put the donor's learner into the member's newest checkpoint (rotated in as a new one, so the
    member's own stays as checkpoint.1.pt), with the donor's live values of `names` perturbed;
    returns those values, for the caller to queue on the dashboard.

    The values are written into the checkpoint as well as queued: the dashboard hands a queued
    change to a run with its next response, which can come after the run has read its values for an
    update, or after its last checkpoint (then the dashboard counts it delivered and the run never
    keeps it). In the checkpoint they are in use from the member's first update after the exploit,
    in every population made by the same command; the queued copy is what the member's page and a
    person see, and it changes nothing when it lands."""
    from experiments.run.folders import RunFolder  # torch: not for --help (experiments/pbt/cli.py)
    from ppo.checkpoint import read_checkpoint, save_checkpoint
    from ppo.resume_point import with_learner_of

    member, donor_folder = RunFolder.at(member_dir), RunFolder.at(donor_dir)
    own = read_checkpoint(member.newest_checkpoint)
    donor = read_checkpoint(donor_folder.newest_checkpoint)
    changes = perturbed({**donor.config, **donor.live_values}, names, rng)  # config: its starting values
    state = dataclasses.replace(with_learner_of(own, donor), live_values={**own.live_values, **changes})
    member.rotate_in(lambda path: save_checkpoint(path, state))
    return changes


def changes_text(changes: dict[str, Any]) -> str:
    return " ".join(f"{name}={value}" for name, value in changes.items())
