"""Learning curves over seeds: `python -m experiments.curves --help`.

Either runs the project (and, with `--peer sb3`, Stable-Baselines3's PPO with the rl-zoo Atari
settings) for several seeds at one budget and schedule, or reads run folders that exist already;
then writes, into `--out`:

* `curves.csv`: label, env_step, mean / min / max / std of the score over seeds, seeds counted;
* `curves.png`: mean (line) and min–max over seeds (band) against agent steps, one colour per label;
* `table.md`: the score at fixed budgets, mean ± std over seeds and each seed's value (one seed:
  its score alone, `12.3 (1 seed)`), then a note for each label too short to draw.

Runs trained with `--dashboard URL` (passed on to each) report to that dashboard; the last line
printed is then the address of their comparison page there.

The std is numpy's (ddof 0): the spread of these seeds about their mean. As an estimate of the
spread of seeds in general it is low by √(n / (n − 1)), 1.22 times for 3 seeds; the table shows
every seed so that either can be worked out.

A run's score at step x is the mean full-game score (all lives, unclipped) of its last
`--window` games that ended by step x, read from the run's `games.csv` — the number the
trainer reports as `score_mean_100`, at any step, for any run, the peer's included.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from configs.cli import OneLineParser, docstring_help, int_in
from configs.fields import MAX_ENV_STEPS, MAX_SEED
from configs.machine import usable_cores
from configs.refusals import fail
from configs.terminal import escaped
from experiments.run.folders import GAMES, SUMMARY
from experiments.run.games_csv import GameRow, read_games
from experiments.seed_runs import print_comparison, seed_run, train_seeds
from experiments.seed_stats import compare

DEFAULT_BUDGETS = (100_000, 250_000, 500_000, 1_000_000)


@dataclass(frozen=True)
class Curve:
    """One label's runs on a common grid of agent steps: scores[seed, step] (NaN before a first game)."""

    label: str
    runs: tuple[str, ...]
    steps: np.ndarray
    scores: np.ndarray


def score_at(games: Sequence[GameRow], steps: np.ndarray, window: int) -> np.ndarray:
    """The mean score of the last `window` games ended by each step (NaN before the first)."""
    ended = np.array([g.env_step for g in games], dtype=np.int64)
    scores = np.array([g.score for g in games], dtype=np.float64)
    order = np.argsort(ended, kind="stable")
    ended, scores = ended[order], scores[order]
    sums = np.concatenate([[0.0], np.cumsum(scores)])
    count = np.searchsorted(ended, steps, side="right")  # games ended by each step
    first = np.maximum(count - window, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (sums[count] - sums[first]) / (count - first), np.nan)


def build_curve(label: str, run_dirs: Sequence[Path], games: Mapping[Path, Sequence[GameRow]], span: int,
                steps: np.ndarray, window: int) -> Curve:
    """The label's scores on `steps`, NaN past `span` (`run_span`: the fewest steps any of its runs
    covers): a label's mean is always over all its seeds, and a label still training leaves the
    others' rows whole. `games`: each run's games.csv, read once."""
    scores = np.stack([score_at(games[d], steps, window) for d in run_dirs])
    scores[:, steps > span] = np.nan
    return Curve(label, tuple(str(d) for d in run_dirs), steps, scores)


def run_span(run_dirs: Sequence[Path], games: Mapping[Path, Sequence[GameRow]]) -> int:
    """The fewest agent steps any of the runs covers: the end of its last game, or its
    summary.json's `env_steps` where that is further (the steps after a run's last game), or its
    schedule's length when it ran to the schedule's end (a 1M schedule in batches of 1,024 ends at
    999,424 steps; its last games are its score at 1M). A run still going (or killed) has a
    summary of status `running` whose steps are its last checkpoint's; its games go further."""
    def steps(run_dir: Path) -> int:
        last_game = max((g.env_step for g in games[run_dir]), default=0)
        summary = read_summary(run_dir)
        try:
            covered = int(summary["env_steps"])
            if summary.get("schedule_ended") is True:
                covered = max(covered, int(summary["schedule_env_steps"]))
        except (ValueError, KeyError, TypeError):
            return last_game
        return max(covered, last_game)
    return min(steps(d) for d in run_dirs)


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json, or {} where there is none (a run still going, a crashed one) or it is
    not a JSON object: the one place curves reads it, for its span and its machines."""
    try:
        summary = json.loads((run_dir / SUMMARY).read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def run_machines(run_dir: Path) -> list[str]:
    """The machines that trained a run, each as one line, from its summary.json (`machines`,
    written by this project's runs and the peer's); ["unrecorded"] where the summary has none."""
    machines = read_summary(run_dir).get("machines")
    lines = [", ".join(f"{k} {v}" for k, v in m.items()) for m in machines if isinstance(m, dict)] if isinstance(machines, list) else []
    return lines or ["unrecorded"]


def machines_note(groups: dict[str, list[Path]]) -> str | None:
    """A note when the runs were not all made on one recorded machine: one seed gives one run per
    machine (ppo/devices.py, machine_fingerprint), so only runs of one machine pair seed by seed;
    across machines, compare the labels' means and spreads."""
    seen: dict[str, int] = {}
    for dirs in groups.values():
        for d in dirs:
            for line in run_machines(d):
                seen[line] = seen.get(line, 0) + 1
    if len(seen) == 1 and "unrecorded" not in seen:
        return None
    listed = "; ".join(f"{line} ({n} run{'s' if n > 1 else ''})" for line, n in sorted(seen.items()))
    return (f"note: these runs were not all made on one recorded machine ({listed}). One seed is one run only on one "
            "machine: compare seeds across runs of one machine only, and elsewhere the means and spreads.")


def write_csv(curves: Sequence[Curve], path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(("label", "env_step", "mean", "min", "max", "std", "seeds"))
        for c in curves:
            for i, step in enumerate(c.steps):
                column = c.scores[:, i]
                present = column[~np.isnan(column)]
                if present.size:
                    out.writerow((c.label, int(step), f"{present.mean():.3f}", f"{present.min():.3f}", f"{present.max():.3f}",
                                  f"{present.std():.3f}", present.size))


def table(curves: Sequence[Curve], budgets: Sequence[int]) -> str:
    """Markdown: one row per budget reached, one column per label (mean ± std, then each seed); with
    two labels, a last column tests the second against the first (`experiments.seed_stats`): the
    difference of the means, its 95% Welch interval and two two-sided p-values."""
    paired = len(curves) == 2
    header = [c.label for c in curves] + ([f"{curves[1].label} − {curves[0].label} [95%]"] if paired else [])
    lines = ["| agent steps | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for budget in budgets:
        cells, columns = [], []
        for c in curves:
            i = int(np.searchsorted(c.steps, budget))
            if i >= len(c.steps) or c.steps[i] != budget:
                cells.append("–")
                continue
            column = c.scores[:, i]
            present = column[~np.isnan(column)]
            columns.append(present)
            cells.append(score_cell(column) if present.size else "–")
        if paired:
            testable = len(columns) == 2 and min(len(x) for x in columns) >= 2
            cells.append(compare(columns[0], columns[1]).line() if testable else "–")
        lines.append(f"| {budget:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def score_cell(column: np.ndarray) -> str:
    """One label at one budget: `**mean** ± std (each seed)`; a spread only where two seeds or more
    have a score (one seed has none to show: `**12.3** (1 seed)`)."""
    present = column[~np.isnan(column)]
    spread = f" ± {present.std():.1f}" if present.size > 1 else ""
    seeds = " / ".join("–" if math.isnan(v) else f"{v:.1f}" for v in column) if column.size > 1 else "1 seed"
    return f"**{present.mean():.1f}**{spread} ({seeds})"


def undrawn_notes(curves: Sequence[Curve], spans: Mapping[str, int], grid: int) -> list[str]:
    """One line for each label whose runs are too short for a curve: they reach `spans[label]`
    agent steps, less than one --grid step, which leaves the label fewer than two points to draw
    (a --budgets step within its runs can be one)."""
    def points(c: Curve) -> int:
        return int(np.any(~np.isnan(c.scores), axis=0).sum())
    def remedy(span: int) -> str:
        return f"; --grid {span} or less draws it" if span > 0 else ""
    return [f"{c.label}: no curve drawn, its runs reach {spans[c.label]:,} agent steps, less than one --grid step "
            f"({grid:,}){remedy(spans[c.label])}" for c in curves if spans[c.label] < grid and points(c) < 2]


def plot(curves: Sequence[Curve], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5), dpi=100)
    for c in curves:
        with warnings.catch_warnings():  # a step where no seed has finished a game yet is simply not drawn
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, low, high = np.nanmean(c.scores, 0), np.nanmin(c.scores, 0), np.nanmax(c.scores, 0)
        seeds = f"mean of {len(c.runs)} seeds" if len(c.runs) > 1 else "1 seed"
        line, = axes.plot(c.steps, mean, label=f"{c.label} ({seeds})")
        axes.fill_between(c.steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel("agent steps")
    axes.set_ylabel(f"full-game score, mean of last {title}")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def parse_runs(specs: Sequence[str]) -> dict[str, list[Path]]:
    """`LABEL=DIR_OR_GLOB` → label's run folders (each holding a games.csv), a PBT population's members too."""
    groups: dict[str, list[Path]] = {}
    for spec in specs:
        label, sep, pattern = spec.partition("=")
        if not sep or not label or not pattern:
            fail(f"--runs {spec}: expected LABEL=DIR (a run folder, or a glob of them, each holding games.csv)")
        matches = sorted({Path(p).parent for p in glob.glob(os.path.join(pattern, "**", GAMES), recursive=True)})
        # A PBT population's folder (python -m experiments.pbt) stands for its members' runs, which sit beside it.
        for population in glob.glob(os.path.join(pattern, "population.json")):
            try:
                members = [str(m["run_uuid"]) for m in json.loads(Path(population).read_text())["members"]]
            except (OSError, ValueError, KeyError, TypeError) as e:  # named, never quoted: see read_all_games
                fail(f"--runs {spec}: {population}: not a population's record ({type(e).__name__})")
            matches += [run for m in members if (run := Path(population).parent.parent / m).joinpath(GAMES).is_file()]
        if not matches:
            fail(f"--runs {spec}: expected run folders holding games.csv; none found under {pattern}")
        groups.setdefault(label, []).extend(matches)
    return groups


def read_all_games(groups: Mapping[str, Sequence[Path]], specs: Sequence[str]) -> dict[Path, list[GameRow]]:
    """Each run's games.csv. One that cannot be read is one line naming the file and what is wrong
    with it, never its content: a run folder is input (a link in it may point anywhere)."""
    games = {}
    for label, dirs in groups.items():
        where = next((f"--runs {spec}: " for spec in specs if spec.partition("=")[0] == label), "")
        for run_dir in dirs:
            path = run_dir / GAMES
            try:
                games[run_dir] = read_games(path)
            except OSError as e:
                fail(f"{where}{path}: {e.strerror or type(e).__name__}")
            except ValueError as e:
                fail(f"{where}{e}")
    return games


MAX_POINTS = 1_000_000  # points of a curve: a --grid of 1 over a long run would not fit the memory
PROG = "python -m experiments.curves"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    max_jobs = 4 * usable_cores()
    parser = OneLineParser(prog=prog, description=docstring_help(__doc__)[0],
                           epilog="Other options (--n-workers, --learning-rate, …) are passed on to every training run.")
    parser.add_argument("--runs", action="append", default=[], metavar="LABEL=DIR",
                        help="read existing runs instead of training: every games.csv under DIR is one seed of LABEL (repeatable)")
    parser.add_argument("--seeds", type=int_in(0, MAX_SEED), nargs="+", default=[1, 2, 3], metavar="INT", help="seeds to train (default: 1 2 3)")
    parser.add_argument("--total-env-steps", type=int_in(1, MAX_ENV_STEPS), default=1_000_000, metavar="INT",
                        help=f"the schedule's length, 1 to {MAX_ENV_STEPS:_} (default: 1000000)")
    parser.add_argument("--budget", type=int_in(1, MAX_ENV_STEPS), default=500_000, metavar="INT",
                        help="agent steps each seed is trained for, at most --total-env-steps (default: 500000)")
    parser.add_argument("--peer", choices=["none", "sb3"], default="none",
                        help="also train SB3 PPO, rl-zoo Atari settings (pip install -e .[compare]) (default: none)")
    parser.add_argument("--jobs", type=int_in(1, max_jobs), default=1, metavar="INT",
                        help=f"runs trained at once, 1 to {max_jobs} (4 a usable core) (default: 1). Each run uses its own worker processes: on a machine with "
                             "C cores give each about C / jobs of them (--n-workers, --envs-per-worker, --torch-threads)")
    parser.add_argument("--window", type=int_in(1, 100_000), default=100, metavar="INT", help="games averaged for a score, 1 to 100_000 (default: 100)")
    parser.add_argument("--grid", type=int_in(1, MAX_ENV_STEPS), default=10_000, metavar="INT",
                        help=f"agent steps between curve points, at most {MAX_POINTS:_} points in all (default: 10000)")
    parser.add_argument("--budgets", type=int_in(1, MAX_ENV_STEPS), nargs="+", default=list(DEFAULT_BUDGETS), metavar="INT", help="rows of the table")
    parser.add_argument("--until", type=int_in(1, MAX_ENV_STEPS), default=None, metavar="INT",
                        help="draw and table the runs up to this many agent steps, as when runs of 1M sit beside runs of 500k "
                             "(default: as far as they go)")
    parser.add_argument("--out", default="curves", metavar="DIR", help="where curves.csv, curves.png, table.md (and trained runs) go")
    args, extra = parser.parse_known_args(argv)
    if extra and args.runs:
        fail(f"{extra[0]}: training options are only taken when training, not with --runs")
    if args.budget > args.total_env_steps:
        fail(f"--budget {args.budget}: expected at most --total-env-steps {args.total_env_steps}")
    out = Path(args.out)

    stopped: list[str] = []  # runs stopped by a signal to them alone, one line each
    if args.runs:
        groups = parse_runs(args.runs)
    else:
        if args.peer == "sb3":
            from experiments.peer_sb3 import sb3_installed

            if not sb3_installed():
                fail('--peer sb3: expected stable-baselines3 installed (pip install -e ".[compare]")')
        sides = {"project": [seed_run("project", s, args, extra) for s in args.seeds]}
        if args.peer == "sb3":
            sides["SB3 PPO (rl-zoo)"] = [seed_run("sb3", s, args, []) for s in args.seeds]
        out.mkdir(parents=True, exist_ok=True)  # the runs go under it
        trained, stopped = train_seeds([run for runs in sides.values() for run in runs], args.jobs)
        folders = iter(trained)
        groups = {label: [next(folders) for _ in runs] for label, runs in sides.items()}

    games = read_all_games(groups, args.runs)
    spans = {label: run_span(dirs, games) if args.until is None else min(run_span(dirs, games), args.until) for label, dirs in groups.items()}
    span = max(spans.values())
    if span // args.grid > MAX_POINTS:
        fail(f"--grid {args.grid}: expected at least {span // MAX_POINTS + 1} (the runs reach {span} agent steps: "
             f"at most {MAX_POINTS:_} points)")
    steps = np.unique(np.concatenate([np.arange(args.grid, span + 1, args.grid), [b for b in args.budgets if b <= span]])).astype(np.int64)
    if steps.size == 0:
        fail(f"the runs reached {span} agent steps, less than one --grid step ({args.grid})")
    out.mkdir(parents=True, exist_ok=True)
    curves = [build_curve(label, dirs, games, spans[label], steps, args.window) for label, dirs in groups.items()]
    write_csv(curves, out / "curves.csv")
    plot(curves, out / "curves.png", f"{args.window} games")
    markdown = table(curves, args.budgets)
    if (note := machines_note(groups)) is not None:
        markdown += f"\n{note}\n"
    for line in [*stopped, *undrawn_notes(curves, spans, args.grid)]:
        markdown += f"\nnote: {line}.\n"
    (out / "table.md").write_text(markdown)
    print(escaped(markdown, lines=True), end="")  # machines read from the runs' summary.json
    print(f"curves: wrote {out / 'curves.csv'}, {out / 'curves.png'}, {out / 'table.md'}")
    if not args.runs:
        print_comparison(extra, groups["project"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
