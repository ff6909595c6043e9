"""What labml-app shows of a run, made to tell the truth about a training run.

labml-app's stock choices fit a generic experiment, not this one:
- its Metrics card charts the first series alphabetically (`approx_kl`) unless one is named
  `loss`: here the full-game score is the chart, the other series a click away on the metrics page;
- its Configurations card lists only configs a user has ticked ("Default configurations"
  otherwise): here it starts with the ones the run set explicitly, the ones this machine chose and
  its live hyperparameters, and labels each value `(set)`, `(machine: why)` or `(default)`: labml
  marks every value that differs from the defaults "explicitly specified", a grouping chosen from the
  cores included (`chosen_by_machine`, which the run's sender adds: experiments/run/labml/sender.py);
- it shows a live hyperparameter as its declaration (`type: DynamicSchedule, default: …`):
  here as the value the run reported using last (else its starting value), and a change not yet
  applied as sent or pending, never as the run's value;
- its runs list shows name, comment, status and start time only: here also a short uuid, the
  seed, the step and the latest score.
`labml_app_patches.present_runs` hooks these into the app; nothing here changes what is stored
from a run's packets except the run's initial selection of configs and of its chart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dashboard.hyperparams import dynamic_specs

SCORE = "score_mean_100"  # the learner's full-game, unclipped score (mean of the last 100 games)
MACHINE = "chosen_by_machine"  # a config item's note of why this machine chose its value
SHORT_UUID = 8  # as git shortens commits: enough to tell a folder's runs apart

Number = int | float


def default_series_preference(names: list[str], stock: Callable[[list[str]], list[int]]) -> list[int]:
    """Which of a run's series (sorted names) its Metrics card charts: the score alone when the
    run has one, else labml-app's own choice (`stock`). 1 = charted, -1 = listed only."""
    if SCORE in names:
        return [1 if name == SCORE else -1 for name in names]
    return stock(names)


def preference_when_score_appears(before: list[str], after: list[str], preferences: list[int],
                                  stock: Callable[[list[str]], list[int]]) -> list[int] | None:
    """The preferences to store when the score is among a run's new series, or None to keep them.

    A run tracks its score only once a game has ended, usually after its first packets set the
    chart to the losses. If the chart is still the one the app chose by itself (nobody picked
    series since), the score becomes the chart; a user's own choice is kept.
    """
    if SCORE in before or SCORE not in after or len(preferences) != len(after):
        return None
    kept = [p for name, p in zip(after, preferences, strict=True) if name in before]
    if kept != default_series_preference(before, stock):
        return None
    return default_series_preference(after, stock)


def initial_selected_configs(configs: Mapping[str, Any]) -> list[str]:
    """The configs the Configurations card lists at first: what the run set explicitly (labml's
    `is_explicitly_specified`, the options that differ from the defaults) and its live ones."""
    live = {spec.key for spec in dynamic_specs(configs).values()}
    return sorted(key for key, c in configs.items()
                  if isinstance(c, dict) and (c.get("is_explicitly_specified") is True or c.get("name", key) in live
                                              or MACHINE in c))


def keep_machine_choices(stored: Mapping[str, Any], packets: list[dict[str, Any]]) -> None:
    """Keep what the run's first leg said the machine chose when a resumed leg re-sends the same
    value without saying why (a resume keeps its run's grouping; only its first leg chose it)."""
    for packet in packets:
        for key, config in (packet.get("configs") or {}).items():
            old = stored.get(key)
            if isinstance(old, dict) and MACHINE in old and isinstance(config, dict) and MACHINE not in config \
                    and config.get("computed") == old.get("computed"):
                config[MACHINE] = old[MACHINE]


def kind_text(config: Mapping[str, Any]) -> Any:
    """A config's value as the card shows it, labelled with who chose it: `4 (set)` on the command
    line, `2 (machine: 2 usable cores)` from this machine, `0.99 (default)`. Other shapes stay as sent."""
    computed = config.get("computed")
    if isinstance(computed, dict | list):
        return computed
    if isinstance(config.get(MACHINE), str):
        return f"{plain(computed)} (machine: {config[MACHINE]})"
    return f"{plain(computed)} ({'set' if config.get('is_explicitly_specified') is True else 'default'})"


def plain(value: Any) -> str:
    """A value as labml-app's card writes one (`100,000`, `false`, `0.00025`)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "none"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def live_text(default: Number, state: Mapping[str, Mapping[str, Number]], key: str) -> str:
    """A live hyperparameter as the Configurations card shows it: the value the run last reported
    using (else the one it started with), then a change handed to it that it has not reported
    using yet, then one still queued: `0.01 (live; 0.02 sent, not applied yet)`."""
    now = state.get("reported", {}).get(key, default)
    notes = [f"{state[part][key]:g} {label}" for part, label in (("sent", "sent, not applied yet"),
                                                                  ("pending", "pending"))
             if key in state.get(part, {})]
    return f"{now:g} (live{'; ' if notes else ''}{'; '.join(notes)})"


def with_live_values(run_data: dict[str, Any], state: Mapping[str, Mapping[str, Number]]) -> dict[str, Any]:
    """labml-app's run data (`Run.get_data`) with each live hyperparameter's `computed` (what the
    Configurations card shows) as `live_text`; its `value` stays the declaration."""
    configs = run_data.get("configs")
    if not isinstance(configs, list):
        return run_data
    specs = dynamic_specs({c["key"]: c for c in configs if isinstance(c, dict) and "key" in c})
    shown = []
    for c in configs:
        spec = specs.get(str(c.get("name", c.get("key")))) if isinstance(c, dict) else None
        if spec is not None:
            c = {**c, "computed": live_text(spec.default, state, spec.key)}  # `value` keeps the declaration
        elif isinstance(c, dict):
            # Not bold as set: labml-app makes every value that differs from the defaults bold.
            c = {**c, "computed": kind_text(c), "is_explicitly_specified": c.get("is_explicitly_specified") is True and MACHINE not in c}
        shown.append(c)
    return {**run_data, "configs": shown}


def seed_of(configs: Mapping[str, Any]) -> int | None:
    """The run's seed, None when its configs have none."""
    config = configs.get("seed")
    computed = config.get("computed") if isinstance(config, dict) else None
    return computed if isinstance(computed, int) and not isinstance(computed, bool) else None


def list_summary(summary: dict[str, Any], series: Mapping[str, Mapping[str, Any]],
                 seed: int | None = None) -> dict[str, Any]:
    """A runs-list entry (`Run.get_summary`) with the run's short uuid and seed before its comment
    (runs of one command share a name: these tell them apart), its last step and its latest score;
    `series` are its tracked series by name (labml-app's `Series.to_data()`: `step`, `value`, ...)."""
    uuid = str(summary.get("run_uuid", ""))[:SHORT_UUID]
    parts = [uuid, *([] if seed is None else [f"seed {seed}"]), *([summary["comment"]] if summary.get("comment") else [])]
    shown = {**summary, "comment": " · ".join(parts)}
    steps = [s["step"][-1] for s in series.values() if len(s.get("step", [])) > 0]
    if steps:
        shown["step"] = int(max(steps))
    score = series.get(SCORE)
    if score is not None and len(score.get("value", [])) > 0:
        shown["metric_values"] = [{"name": SCORE, "value": float(score["value"][-1])}]
    return shown
