"""Train PPO on Breakout as a labml experiment: `python -m experiments.breakout --help`.

The last line printed is the path of the run's `summary.json`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from configs.cli import OneLineParser, fail, parse_config
from configs.fields import ConfigError
from configs.grouping import grouped_unless_chosen, machine_choices
from dashboard.labml_client import note_machine_choices
from experiments.run.console import say
from game.atari import canonical_game

PROG = "python -m experiments.breakout"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    def extra(parser: OneLineParser) -> None:
        parser.add_argument("--resume", metavar="RUN_UUID", help="continue this run from its last checkpoint")

    config, args, overrides = parse_config(argv, prog, "Train a PPO agent on Atari Breakout as a labml experiment.", extra, canonical_game)
    # The learner (torch, labml) is imported once the command line is accepted: --help, --version
    # and a refused option answer without waiting for torch to load.
    from experiments.run.lifecycle import TrainingRun
    from experiments.run.preflight import check_can_start
    from experiments.run.resume import resume_config
    from ppo.checkpoint import CheckpointError

    resume = None
    try:
        if args.resume is not None:  # checked whole, check_can_start included, before anything starts
            config, resume = resume_config(Path(config.data_dir), args.resume, overrides)
        else:  # unless chosen on the command line: the games in one process per usable core
            config = grouped_unless_chosen(config, overrides)
            # The dashboard's configuration card tells what this machine chose from what the user set;
            # a resume keeps its run's grouping, which the dashboard keeps as the first leg said.
            note_machine_choices(machine_choices(config, overrides))
            check_can_start(config)  # the device exists, the run folder can be written: before anything starts
    except (ConfigError, CheckpointError) as e:
        fail(str(e))
    run = TrainingRun(config, resume, run_uuid=args.resume)
    try:
        result = run.run()
    except KeyboardInterrupt:  # a second Ctrl-C/SIGTERM: the workers are closed already
        say(f"stopped at once; {run.resume_point()}")
        return 130
    except ConnectionError as e:  # Ray could not reach --ray-address (any other refused connection is no such thing)
        if config.backend != "ray":
            raise
        fail(f"--ray-address {config.ray_address}: could not connect to a Ray cluster there ({str(e).splitlines()[0]})")
    # stdout holds only this path (everything for people goes to stderr): `$(python -m experiments.breakout)` is the path.
    if result.summary_path is not None:
        say(str(result.summary_path), sys.stdout)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
