"""How the dashboard shows a run (dashboard/run_display.py), on hand-made labml-app data; the same
choices in a real dashboard and browser are in test_dashboard_truth.py."""

from __future__ import annotations

from pathlib import Path

from dashboard.hyperparams import HyperParamStore
from dashboard.run_display import (
    default_series_preference,
    initial_selected_configs,
    keep_machine_choices,
    list_summary,
    preference_when_score_appears,
    seed_of,
    with_live_values,
)


def stock(names: list[str]) -> list[int]:  # labml-app's choice: the first series alphabetically
    return [1] + [-1] * (len(names) - 1) if names else []


LR_DECLARED = {"type": "DynamicSchedule", "default": 2.5e-4, "range": [0.0, 1e-2], "dynamic_type": "float"}
CONFIGS = {
    "learning_rate": {"name": "learning_rate", "computed": LR_DECLARED, "is_explicitly_specified": False},
    "n_workers": {"name": "n_workers", "computed": 2, "is_explicitly_specified": True},
    "gamma": {"name": "gamma", "computed": 0.99, "is_explicitly_specified": False},
}


def test_the_score_is_the_chart_when_there_is_one() -> None:
    assert default_series_preference(["approx_kl", "entropy", "score_mean_100"], stock) == [-1, -1, 1]
    assert default_series_preference(["approx_kl", "entropy"], stock) == [1, -1]  # labml-app's choice


def test_a_late_score_becomes_the_chart_unless_the_user_picked_series() -> None:
    before, after = ["approx_kl", "entropy"], ["approx_kl", "entropy", "score_mean_100"]
    # the app's own choice for `before`, with the new series inserted unselected (as labml-app does)
    assert preference_when_score_appears(before, after, [1, -1, -1], stock) == [-1, -1, 1]
    assert preference_when_score_appears(before, after, [-1, 1, -1], stock) is None  # the user chose entropy
    assert preference_when_score_appears(after, [*after, "sps"], [-1, -1, 1, -1], stock) is None  # not new


def test_the_configurations_card_starts_with_the_set_and_the_live_options() -> None:
    assert initial_selected_configs(CONFIGS) == ["learning_rate", "n_workers"]


def test_a_live_value_shows_what_the_run_applied_and_a_change_on_its_way(tmp_path: Path) -> None:
    store = HyperParamStore(tmp_path / "hp.json")
    run = {"configs": [{"key": k, **c} for k, c in CONFIGS.items()]}

    def shown() -> str:
        return next(c for c in with_live_values(run, store.get("r"))["configs"] if c["key"] == "learning_rate")["computed"]

    assert shown() == "0.00025 (live)"  # declared, nothing changed
    store.set_reported("r", {"learning_rate": 5e-4})
    assert shown() == "0.0005 (live)"
    store.add_pending("r", {"learning_rate": 1e-3})
    assert shown() == "0.0005 (live; 0.001 pending)"  # queued, not delivered yet
    store.take_pending("r")
    assert shown() == "0.0005 (live; 0.001 sent, not applied yet)"  # delivered, not yet used
    store.set_reported("r", {"learning_rate": 5e-4})  # a report from before the run received it
    assert shown() == "0.0005 (live; 0.001 sent, not applied yet)"
    store.set_reported("r", {"learning_rate": 1e-3})  # the run trains with it
    assert shown() == "0.001 (live)"


def test_a_runs_list_entry_has_a_short_uuid_its_seed_the_step_and_the_latest_score() -> None:
    summary = {"run_uuid": "0123456789abcdef0123456789abcdef", "name": "Breakout", "comment": ""}
    series = {"score_mean_100": {"step": [512, 1024], "value": [1.5, 2.25]}, "sps": {"step": [1536], "value": [40.0]}}
    assert list_summary(summary, series) == {**summary, "comment": "01234567", "step": 1536,
                                             "metric_values": [{"name": "score_mean_100", "value": 2.25}]}
    assert list_summary({**summary, "comment": "lr sweep"}, {})["comment"] == "01234567 · lr sweep"
    assert list_summary({**summary, "comment": "lr sweep"}, {}, seed=3)["comment"] == "01234567 · seed 3 · lr sweep"
    assert seed_of({"seed": {"computed": 3}}) == 3 and seed_of({"seed": {"computed": True}}) is None and seed_of({}) is None


def test_the_card_tells_set_from_chosen_by_the_machine_from_default() -> None:
    # labml marks every value that differs from the defaults explicitly specified, the grouping the
    # machine chose included; the run's sender notes that one (experiments/run/labml/sender.py).
    configs = {"epochs": {"name": "epochs", "computed": 3, "is_explicitly_specified": True},
               "n_workers": {"name": "n_workers", "computed": 2, "is_explicitly_specified": True,
                             "chosen_by_machine": "2 usable cores"},
               "envs_per_worker": {"name": "envs_per_worker", "computed": 4, "is_explicitly_specified": True,
                                   "chosen_by_machine": "2 usable cores"},
               "gamma": {"name": "gamma", "computed": 0.99, "is_explicitly_specified": False},
               "updates": {"name": "updates", "computed": 100000, "is_explicitly_specified": True},
               "target_kl": {"name": "target_kl", "computed": None, "is_explicitly_specified": False},
               "anneal_learning_rate": {"name": "anneal_learning_rate", "computed": False, "is_explicitly_specified": True}}
    shown = {c["key"]: c for c in with_live_values({"configs": [{"key": k, **c} for k, c in configs.items()]},
                                                    {})["configs"]}
    assert {k: c["computed"] for k, c in shown.items()} == {
        "epochs": "3 (set)", "n_workers": "2 (machine: 2 usable cores)", "envs_per_worker": "4 (machine: 2 usable cores)",
        "gamma": "0.99 (default)", "updates": "100,000 (set)", "target_kl": "none (default)",
        "anneal_learning_rate": "false (set)"}  # written as labml-app's card writes values
    # only what the user set is bold
    assert [k for k, c in shown.items() if c["is_explicitly_specified"]] == ["epochs", "updates", "anneal_learning_rate"]
    assert initial_selected_configs(configs) == ["anneal_learning_rate", "envs_per_worker", "epochs", "n_workers", "updates"]


def test_a_resumed_leg_keeps_what_its_first_leg_said_the_machine_chose() -> None:
    stored = {"n_workers": {"name": "n_workers", "computed": 2, "chosen_by_machine": "2 usable cores"},
              "envs_per_worker": {"name": "envs_per_worker", "computed": 4, "chosen_by_machine": "2 usable cores"}}
    # The resume keeps n_workers as it ran; --n-workers 4 on its command line regroups (4 × 2): set by the user.
    packets = [{"configs": {"n_workers": {"name": "n_workers", "computed": 2},
                            "envs_per_worker": {"name": "envs_per_worker", "computed": 2}}}]
    keep_machine_choices(stored, packets)
    assert packets[0]["configs"]["n_workers"]["chosen_by_machine"] == "2 usable cores"
    assert "chosen_by_machine" not in packets[0]["configs"]["envs_per_worker"]


def test_the_run_marks_only_the_grouping_it_chose_from_the_cores() -> None:
    from configs.launch import launch_config
    from experiments.run.labml.sender import marked_configs

    def machine_choices(overrides: dict[str, object]) -> dict[str, str]:
        return launch_config(overrides, cores=2)[1]

    assert machine_choices({}) == {"n_workers": "2 usable cores", "envs_per_worker": "2 usable cores"}
    assert machine_choices({"n_workers": 4}) == {}  # the command line chose
    assert machine_choices({"backend": "ray"}) == {}  # Ray actors: not grouped by cores
    sent = {"n_workers": {"name": "n_workers", "computed": 2}, "gamma": {"name": "gamma", "computed": 0.99}}
    assert marked_configs(sent, {"n_workers": "2 usable cores"}) == {
        "n_workers": {"name": "n_workers", "computed": 2, "chosen_by_machine": "2 usable cores"}, "gamma": sent["gamma"]}
