"""Train PPO on Breakout as a labml experiment: `python -m experiments.breakout --help`.

Parse, plan, run: the command line is read from configs/ alone (so `--help` and a refused option
answer before torch loads), the launch is planned whole before anything starts, then the run acts
on the plan. The last line printed on stdout is the path of the run's `summary.json` (relative
to the current folder when it lies under it, as every path the run prints).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from configs.cli import OneLineParser, parse_overrides
from configs.fields import ConfigError
from configs.refusals import fail
from experiments.run.console import say, shown
from experiments.run.plan import LaunchRefused, plan_launch
from game.atari import canonical_game
from ray_setup.errors import first_line

PROG = "python -m experiments.breakout"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    def extra(parser: OneLineParser) -> None:
        parser.add_argument("--resume", metavar="RUN_UUID", help="continue this run from its last checkpoint (its uuid, or the "
                                                                 "8-character id the dashboard shows)")

    args, overrides = parse_overrides(argv, prog, "Train a PPO agent on Atari Breakout as a labml experiment.", extra, canonical_game)
    try:
        plan = plan_launch(overrides, resume=args.resume)
    except (ConfigError, LaunchRefused) as e:
        fail(str(e))
    if plan.config.backend == "ray":
        from ray_setup.connection import connection_refusal  # imports Ray: only for a run on Ray

        if (refusal := connection_refusal(plan.config.ray_address)) is not None:
            fail(refusal)
    from experiments.run.lifecycle import TrainingRun  # the learner: torch and labml

    run = TrainingRun(plan)
    try:
        result = run.run()
    except KeyboardInterrupt:  # a second Ctrl-C/SIGTERM: the workers are closed already
        say(f"stopped at once; {run.resume_point()}")
        return 130
    except ConnectionError as e:  # Ray could not reach --ray-address (any other refused connection is no such thing)
        if plan.config.backend != "ray":
            raise
        fail(f"--ray-address {plan.config.ray_address}: could not connect to a Ray cluster there ({first_line(e)})")
    # stdout holds only this path (everything for people goes to stderr): `$(python -m experiments.breakout)` is the path.
    if result.summary_path is not None:
        say(shown(result.summary_path), sys.stdout)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
