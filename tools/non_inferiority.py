"""Does a candidate learn no worse than the reference, per agent step, within a margin set in advance?
(a study's script, not one of the commands)

    python tools/non_inferiority.py --runs "fp32=docs/runs/value-clip-0.5-intel" --runs "bf16=docs/runs/bf16-intel-1M"

`experiments.curves` asks whether two settings differ (a two-sided test). Changing a default asks a
different question: is the new one no worse by more than a margin that was fixed before the runs
were read? This script applies that rule at each budget:

  - the margin is a share (`--margin-share`, default one half) of the reference's seed spread
    there (the standard deviation over its seeds, ddof 1);
  - the candidate holds at a budget when the one-sided 95% lower bound (Welch) of
    mean(candidate) − mean(reference) lies above −margin;
  - the rule holds when it holds at every budget;
  - `seeds a side` is how many seeds each side needs for the rule to hold with 80% probability
    if the two truly learn alike, from the spreads measured (`experiments.seed_stats.seeds_needed`);
  - `chance then, if as measured` is the probability that it holds once each side has that many
    seeds, given those measured, if the candidate truly differs by the difference measured
    (conditional power, `experiments.seed_stats.chance_to_hold`): low, the measured gap itself
    stands in the way, and more seeds are unlikely to show the candidate no worse.

The first `--runs` label is the reference, the second the candidate (a label may be given several
times: its folders are pooled). A score is the mean full-game score of the last 100 games, as in
`experiments.curves`. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence

import numpy as np

from configs.cli import OneLineParser, docstring_help, finite_number, int_in
from configs.fields import MAX_ENV_STEPS
from configs.refusals import bad_value, fail
from experiments.curves import build_curve, parse_runs, read_all_games, run_span
from experiments.seed_stats import chance_to_hold, non_inferiority, seeds_needed

PROG = "python tools/non_inferiority.py"
DEFAULT_BUDGETS = (500_000, 750_000, 1_000_000)


def parse_share(text: str) -> float:
    if (share := finite_number(text, 0.0, math.inf, low_open=True)) is None:
        bad_value("--margin-share", text, "a number > 0 (the margin as a share of the reference's seed spread)")
    return share


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    parser = OneLineParser(prog=prog, description=docstring_help(__doc__)[0])
    parser.add_argument("--runs", action="append", default=[], metavar="LABEL=DIR",
                        help="the reference's runs first, then the candidate's (each repeatable for more folders)")
    parser.add_argument("--budgets", type=int_in(1, MAX_ENV_STEPS), nargs="+", default=list(DEFAULT_BUDGETS), metavar="INT",
                        help="agent steps at which the rule is applied (default: 500000 750000 1000000)")
    parser.add_argument("--margin-share", default="0.5", metavar="X", help="the margin as a share of the reference's seed spread (default: 0.5)")
    args = parser.parse_args(argv)
    share = parse_share(args.margin_share)
    groups = parse_runs(args.runs)
    if len(groups) != 2:
        fail(f"--runs: expected two labels, the reference's and the candidate's (got {len(groups)}: {', '.join(groups)})")
    (reference, ref_dirs), (candidate, cand_dirs) = groups.items()
    games = read_all_games(groups, args.runs)
    steps = np.array(sorted(args.budgets), dtype=np.int64)
    curves = [build_curve(label, dirs, games, run_span(dirs, games), steps, 100) for label, dirs in groups.items()]
    rows = []
    print(f"| agent steps | {reference} | {candidate} | margin | {candidate} − {reference} [one-sided 95% lower] | holds | seeds a side "
          "| chance then, if as measured |")
    print("|---|---|---|---|---|---|---|---|")
    for i, budget in enumerate(steps):
        a, b = (c.scores[:, i][~np.isnan(c.scores[:, i])] for c in curves)
        if len(a) < 2 or len(b) < 2:
            print(f"| {budget:,} | {len(a)} seeds | {len(b)} seeds | – | – | – | – | – |")
            continue
        sd_a, sd_b = float(a.std(ddof=1)), float(b.std(ddof=1))
        margin = share * sd_a
        test = non_inferiority(a.tolist(), b.tolist(), margin)
        needed = seeds_needed(sd_a, sd_b, margin)
        chance = chance_to_hold(test.difference, sd_a, sd_b, margin, needed, have=(len(a), len(b)))
        rows.append({"budget": int(budget), "reference": a.tolist(), "candidate": b.tolist(), "margin": margin,
                     "difference": test.difference, "low": test.low, "holds": test.holds, "seeds_needed": needed,
                     "chance_if_as_measured": chance})
        print(f"| {budget:,} | {a.mean():.1f} ± {sd_a:.1f} ({len(a)}) | {b.mean():.1f} ± {sd_b:.1f} ({len(b)}) | {margin:.2f} | "
              f"{test.difference:+.2f} [{test.low:+.2f}] | {'yes' if test.holds else 'no'} | {needed} | {chance:.0%} |")
    holds = bool(rows) and len(rows) == len(steps) and all(r["holds"] for r in rows)
    print(f"the rule {'holds' if holds else 'does not hold'}: {candidate} is "
          f"{'shown' if holds else 'not shown'} to learn no worse than {reference} by more than "
          f"{share:g} of {reference}'s seed spread at every budget")
    print(json.dumps({"reference": reference, "candidate": candidate, "reference_runs": [str(d) for d in ref_dirs],
                      "candidate_runs": [str(d) for d in cand_dirs], "margin_share": share, "rows": rows, "holds": holds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
