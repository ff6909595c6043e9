"""What a run says when it starts (what it will do, and where) and when it ends: a short summary
and the exact commands to go on with.

    completed: update 98 of 98 · 100,352 agent steps in 0:03:41 (454 steps/s, start-up included) · score 2.9 (mean of the last 100 of 130 games)
    next:
      watch it play, 10 games, the first filmed:  python -m experiments.evaluate --run 6f1c… --games 10 --video evaluate.mp4
      …

Every command is printed whole, with `--data-dir` when the run's is not the default, so it can be
pasted as it is from the folder the run was started in; paths under that folder are printed relative
to it (`runs/breakout/…`), as a person would type them.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from configs.machine import usable_cores
from configs.ppo import PPOConfig
from configs.urls import DEFAULT_DASHBOARD, run_page
from experiments.run.console import shown
from experiments.run.progress import hms

TRAIN = "python -m experiments.breakout"
EVALUATE = "python -m experiments.evaluate"


def _data_dir_option(config: PPOConfig) -> str:
    default = PPOConfig.__dataclass_fields__["data_dir"].default
    return "" if config.data_dir == default else f" --data-dir {shlex.quote(config.data_dir)}"


# Not carried into a new, longer run: the schedule (the new run sets its own length), where the
# run reports (a new run names its dashboard itself) and how games are grouped into processes
# (chosen from the cores again; grouping changes no number learned).
NOT_CARRIED = frozenset({"updates", "total_env_steps", "stop_after_env_steps", "dashboard", "data_dir",
                         "n_workers", "envs_per_worker"})


def _option_text(value: Any) -> str:
    """A config value as the command line reads it back: true/false, none, the number or text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else shlex.quote(str(value))


def changed_options(config: PPOConfig) -> str:
    """` --game Pong --learning-rate 0.001 …`: the run's settings that differ from the defaults, so
    that a longer run started from them learns the same thing, only for longer."""
    return "".join(f" --{name.replace('_', '-')} {_option_text(value)}" for name, value in config.non_defaults().items()
                   if name not in NOT_CARRIED)


def resume_command(config: PPOConfig, run_uuid: str, dashboard: str | None = None) -> str:
    """The command that continues the run from its last checkpoint. A resume sends to a dashboard
    only when its own command line names one, so the run's dashboard is named again."""
    command = f"{TRAIN} --resume {run_uuid}{_data_dir_option(config)}"
    return command + (f" --dashboard {shlex.quote(dashboard)}" if dashboard else "")


def cluster_lost_line(address: str, run_uuid: str, kept_update: int | None, config: PPOConfig, dashboard: str | None) -> str:
    """A run whose Ray cluster lost its head, in one line: the cluster, the checkpoint kept, and the
    commands that go on from it: on a cluster at that address again (a new one may have another:
    that one is given instead), or on this machine's own worker processes, since the run's folder
    is here and its games need no cluster (a resume may change its backend)."""
    if kept_update is None:
        return f"train: the Ray cluster at {address} was lost (its head) before the run's first checkpoint: nothing to resume; start the run again"
    resume = resume_command(config, run_uuid, dashboard)
    return (f"train: the Ray cluster at {address} was lost (its head); the run's last checkpoint (update {kept_update:,}) is "
            f"kept; go on with: {resume} --ray-address {shlex.quote(address)} (a cluster there again; a new one: its address), "
            f"or on this machine alone: {resume} --backend local --ray-address none")


def evaluate_command(config: PPOConfig, run_uuid: str) -> str:
    # A bare file name: evaluate films into the run's own folder, where the dashboard shows it.
    return f"{EVALUATE} --run {run_uuid}{_data_dir_option(config)} --games 10 --video evaluate.mp4"


def start_lines(config: PPOConfig, run_uuid: str, run_dir: Path, precision: str) -> str:
    """`breakout run 6f1c… in runs/breakout/6f1c…`, how the games are grouped into processes, and
    the network's arithmetic (`precision`: `ppo.devices.precision_label`)."""
    cores = usable_cores()
    plural = "s" if config.n_workers > 1 else ""
    per_worker = f" of {config.envs_per_worker}" if config.envs_per_worker > 1 else ""
    if config.backend == "ray":  # actors on a cluster's nodes (or a private Ray's one): this machine's cores say nothing
        where = f"the Ray cluster at {config.ray_address}" if config.ray_address else "a private Ray on this machine"
        workers = f"{config.n_workers} Ray actor{plural}{per_worker} ({where})"
    elif config.backend == "serial":
        workers = "the trainer's own process"
    else:
        workers = f"{config.n_workers} worker process{'es' if plural else ''}{per_worker} ({cores} usable core{'s' if cores > 1 else ''})"
    return (f"{config.name} run {run_uuid} in {shown(run_dir)}\n"
            f"{config.n_envs} games in {workers} · "
            f"{config.last_update:,} update{'s' if config.last_update > 1 else ''} of {config.batch_size:,} agent steps · "
            f"network in {precision}")


def summary_line(summary: dict[str, Any], last_update: int, score_window: int) -> str:
    """`completed: update 97 of 97 · … · score 10.2 (mean of the last 100 of 1,873 games)`; the
    score is over the run's `--score-window` games (`score_mean_100` is labml's name for it). A
    resumed run says this leg's steps and time, then the whole run's, each labelled."""
    score = summary["score_mean_100"]
    score_text = ("no game finished yet" if score is None
                  else f"score {score:.1f} (mean of the last {min(summary['games'], score_window):,} of {summary['games']:,} games)")
    sps = "" if summary["sps"] is None else f" ({summary['sps']:,.0f} steps/s, start-up included)"
    leg_steps = summary.get("leg_env_steps", summary["env_steps"])
    run_time = summary.get("run_wall_time_s", summary["wall_time_s"])
    if leg_steps == summary["env_steps"] and run_time == summary["wall_time_s"]:  # one leg: the run
        steps = f"{summary['env_steps']:,} agent steps in {hms(summary['wall_time_s'])}{sps}"
    else:  # a resumed run; the time of its earlier legs is unknown where they left no summary
        run_steps = f"the run: {summary['env_steps']:,} agent steps" + (
            f" in {hms(run_time)}" if run_time != summary["wall_time_s"] else "")
        steps = f"this leg: {leg_steps:,} agent steps in {hms(summary['wall_time_s'])}{sps} · {run_steps}"
    return f"{summary['status']}: update {summary['updates']:,} of {last_update:,} · {steps} · {score_text}"


MAX_SUMMARY_BYTES = 1024 * 1024  # a summary.json is under 2 KB; anything far larger is not one


def earlier_wall_time(summary_json: Path) -> float:
    """The wall time of a run's earlier legs, from the summary.json its last leg left (0 where
    there is none, or it is not one): what a resumed run adds its own time to."""
    if summary_json.is_symlink() or not summary_json.is_file():  # the run folder's checks refuse those
        return 0.0
    try:
        with summary_json.open("rb") as f:
            earlier = json.loads(f.read(MAX_SUMMARY_BYTES))
    except (OSError, ValueError):
        return 0.0
    seconds = earlier.get("run_wall_time_s", earlier.get("wall_time_s")) if isinstance(earlier, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return 0.0
    return max(float(seconds), 0.0)


def next_commands(summary: dict[str, Any], config: PPOConfig, dashboard: str | None) -> list[str]:
    """The lines after the summary: watch it play, go on, look at it in the dashboard."""
    uuid = summary["run_uuid"]
    lines = ["next:"]
    if summary["checkpoint"]:
        lines += ["  watch it play, 10 whole games, the first filmed:", f"    {evaluate_command(config, uuid)}"]
        if summary["updates"] < config.last_update:
            lines += [f"  continue it from update {summary['updates']:,}:", f"    {resume_command(config, uuid, dashboard)}"]
        elif summary["updates"] < config.n_updates:  # it stopped at its --stop-after-env-steps budget
            lines += [f"  continue it to the end of its schedule (update {config.n_updates:,}):",
                      f"    {resume_command(config, uuid, dashboard)} --stop-after-env-steps none"]
        else:
            lines += ["  train longer: its schedule is done (the learning rate has decayed to 0); start a longer run:",
                      f"    {TRAIN} --total-env-steps {max(10_000_000, 2 * summary['env_steps'])}{changed_options(config)}{_data_dir_option(config)}"]
    if dashboard:
        lines += ["  its charts in the dashboard:", f"    {run_page(dashboard, uuid)}"]
    else:
        lines += ["  watch runs live in a dashboard: start one, then add --dashboard to a run (or to a --resume):",
                  "    python -m experiments.dashboard", f"    {TRAIN} --dashboard {DEFAULT_DASHBOARD}"]
    return lines
