"""What each value clip ε would hold back at one point of a run (a study's script, not one of the commands).

    python tools/value_clip.py --run RUN_UUID --epsilons 0.05 0.1 0.2 0.5

A clipped value loss, max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²), gives a sample no value
gradient at all once its value has moved more than ε from the one it was sampled with and the
clipped term is the larger: that sample teaches the critic nothing for the rest of the update.
A run reports the share of such samples as `value_clip_fraction`, for the ε it trains with (the
policy's annealed clip by default). This script answers what a user choosing ε asks next: what
would another ε do at this point of this run? It loads the run's checkpoint, samples one rollout
from it (the run's own games, continued exactly), then runs one whole update per ε, each from the
checkpoint's parameters, Adam state and shuffle, and prints each update's `value_clip_fraction`
(the mean over its minibatches, as a run reports it) and value loss. The first row is the run's
own ε. Nothing is written: the run is left as it was. The last line printed is one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from configs.cli import OneLineParser, docstring_help, finite_number
from configs.ppo import ConfigError, PPOConfig, validate
from configs.refusals import bad_value
from experiments.evaluate import check_device_name, locate_checkpoint, parse_device, read_checked
from experiments.run.console import say

DEFAULT_EPSILONS = ("0.05", "0.1", "0.2", "0.5", "1.0")


def parse_epsilon(text: str) -> float:
    if (value := finite_number(text, 0.0)) is None:  # any finite ε ≥ 0 is a clip the arithmetic takes
        bad_value("--epsilons", text, "finite numbers ≥ 0 (value clip ranges, in the value's own units)")
    return value


def own_clip(config: PPOConfig, epsilon: float | None) -> str:
    """How the run itself sets its value clip, for the first row."""
    if epsilon is None:
        return "the run's own: none (--clip-value-loss false)"
    if config.value_clip_range is None:
        return f"the run's own: {epsilon:.4g} (the policy's clip{', annealed' if config.anneal_clip_range else ''})"
    return f"the run's own: {epsilon:.4g} (--value-clip-range, fixed)"


PROG = "python tools/value_clip.py"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = OneLineParser(prog=prog, description=docstring_help(__doc__)[0])
    parser.add_argument("--run", metavar="RUN_UUID", help="the run to measure: its last checkpoint, or the --checkpoint given")
    parser.add_argument("--checkpoint", metavar="PATH", help="a checkpoint file to measure (alone, or with --run)")
    parser.add_argument("--data-dir", metavar="DIR", default="runs", help="folder that holds the runs (default: runs)")
    parser.add_argument("--epsilons", metavar="E", nargs="+", default=list(DEFAULT_EPSILONS),
                        help=f"value clip ranges to try, beside the run's own (default: {' '.join(DEFAULT_EPSILONS)})")
    parser.add_argument("--device", metavar="DEVICE", default="cpu", help="cpu (the default), auto, cuda or cuda:N")
    args = parser.parse_args(argv)
    epsilons = [parse_epsilon(text) for text in args.epsilons]
    check_device_name(args.device)
    located = locate_checkpoint(args.run, args.checkpoint, args.data_dir)
    path = located.path
    # The learner (torch) once the command line is accepted: --help and a refused option answer without it.
    from game.atari import is_known_game
    from game.vector import game_specs, make_pool
    from ppo.seeding import derive_seeds
    from ppo.trainer import Trainer

    device = parse_device(args.device)
    point = read_checked(path)  # checked whole, as a resume checks it
    learner = point.checkpoint
    try:
        # Its games on worker processes here, whatever transport trained it; no dashboard.
        config = validate(dataclasses.replace(point.config, backend="local", ray_address=None, dashboard=None), is_known_game)
    except ConfigError as e:
        bad_value(located.option, located.value, f"a checkpoint written by python -m experiments.breakout ({e})")
    live = learner.live_values
    for note in point.notes:
        say(note)

    seeds = derive_seeds(config.seed, config.n_envs)
    with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
        trainer = Trainer(config, pool, seeds, device, live_values=lambda: live, on_event=say)
        trainer.load_state_dict(learner)  # parameters, Adam, the shuffle and the games' emulator states
        settings = trainer.schedule()  # the next update's, as the run would use them
        at_update, at_steps = trainer.update, trainer.env_steps
        trainer.collect()
        checkpoint = trainer.snapshot()
        rows: list[dict[str, Any]] = []
        for label, epsilon in [(own_clip(config, settings.value_clip_range), settings.value_clip_range),
                               *((f"{e:g}", e) for e in epsilons)]:
            trainer.restore(checkpoint)  # every update from the same point: only ε differs
            metrics = trainer.optimize(dataclasses.replace(settings, value_clip_range=epsilon))
            rows.append({"label": label, "value_clip_range": epsilon, "value_clip_fraction": metrics["value_clip_fraction"],
                         "value_loss": metrics["value_loss"]})

    print(f"{path}: update {at_update:,} of {config.n_updates:,} ({at_steps:,} agent steps), "
          f"one rollout of {trainer.rollout.size:,} transitions, one update of {settings.epochs} epoch(s) × "
          f"{config.minibatches} minibatches per ε, each from the checkpoint")
    width = max(len(r["label"]) for r in rows)
    print(f"{'value clip ε':<{width}}  value_clip_fraction  value_loss")
    for r in rows:
        print(f"{r['label']:<{width}}  {r['value_clip_fraction']:>19.1%}  {r['value_loss']:>10.4f}")
    print(json.dumps({"checkpoint": str(path), "run_uuid": located.run_uuid, "update": at_update, "n_updates": config.n_updates,
                      "env_steps": at_steps, "clip_range": settings.clip_range, "rows": rows}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
