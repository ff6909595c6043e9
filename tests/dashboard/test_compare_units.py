"""The comparison's parts that need no run: the address commands print, what counts as a changed
live value, a run's training time, and the runs list's cap on ticks."""

from __future__ import annotations

import re
from typing import Any

import pytest
from dashboard_support import REPO

from dashboard.client import MAX_COMPARED_RUNS, compare_line
from dashboard.compare import changed_live_values, seed_of, training_seconds
from experiments.seed_runs import dashboard_of
from experiments.sweep_rows import TrialRow, print_comparison


def test_the_printed_address_leaves_credentials_out_and_caps_the_runs() -> None:
    uuids = [f"{i:032x}" for i in range(20)]
    line = compare_line("http://user:secret@127.0.0.1:5005/api/v1/default", uuids, "trials")
    assert line == (f"compare the first {MAX_COMPARED_RUNS} of 20 trials on the dashboard: "
                    f"http://127.0.0.1:5005/compare?runs={','.join(uuids[:MAX_COMPARED_RUNS])}")
    assert compare_line("http://h:1/", uuids[:2], "members") == \
        f"compare the 2 members on the dashboard: http://h:1/compare?runs={uuids[0]},{uuids[1]}"
    assert dashboard_of(["--n-workers", "2", "--dashboard", "http://h:1"]) == "http://h:1"
    assert dashboard_of(["--dashboard=http://h:2"]) == "http://h:2"
    assert dashboard_of(["--dashboard", "none"]) is None and dashboard_of(["--seed", "3"]) is None


def test_a_live_value_is_changed_when_the_run_uses_another_than_it_started_with() -> None:
    def live(key: str, kind: str, default: float) -> dict[str, Any]:
        return {"name": key, "computed": {"type": "DynamicSchedule", "default": default, "range": [0, 16],
                                          "dynamic_type": kind}}

    configs = {"epochs": live("epochs", "int", 4), "learning_rate": live("learning_rate", "float", 2.5e-4),
               "clip_range": live("clip_range", "float", 0.1), "seed": {"name": "seed", "computed": 3}}
    # labml reports every value as a float; a value handed out (delivered) or queued is not in use yet.
    state = {"reported": {"epochs": 4.0, "learning_rate": 3e-4}, "delivered": {"epochs": 4, "clip_range": 0.2},
             "pending": {"clip_range": 0.3}, "sent": {}}
    assert changed_live_values(configs, state) == {"learning_rate": {"start": 2.5e-4, "now": 3e-4}}
    assert seed_of(configs) == 3 and seed_of({"seed": {"computed": True}}) is None and seed_of({}) is None


def test_a_sweep_prints_the_page_of_the_trials_that_trained(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [TrialRow(2, "b" * 32, {}, updates=5), TrialRow(1, "a" * 32, {}, updates=0),
            TrialRow(3, "c" * 32, {}, status="failed")]  # ranked best first; Ray lost the third before it ran
    print_comparison("http://127.0.0.1:5005/api/v1/default", rows)
    print_comparison(None, rows)  # trials that reported to no dashboard
    assert capsys.readouterr().out == (f"compare the 2 trials on the dashboard: http://127.0.0.1:5005/compare?runs="
                                       f"{'b' * 32},{'a' * 32}\n")


def test_the_runs_lists_ticks_stop_at_the_apis_cap() -> None:
    script = (REPO / "dashboard" / "static" / "compare-pick.js").read_text()
    assert re.search(r"const MAX_RUNS = (\d+);", script).group(1) == str(MAX_COMPARED_RUNS)  # type: ignore[union-attr]


def test_a_runs_training_time_sums_each_updates_steps_over_its_speed() -> None:
    # Updates of 64 agent steps at 32, 64 and 16 steps/s took 2, 1 and 4 s: done at 2, 3 and 7 s.
    sps = {"step": [64, 128, 192], "value": [32.0, 64.0, 16.0]}
    assert training_seconds([64, 128, 192], sps) == [2.0, 3.0, 7.0]
    assert training_seconds([96, 160], sps) == [2.5, 5.0]  # between two updates: read on the line between them
    assert training_seconds([64], None) == [] and training_seconds([64], {"step": [64], "value": [0.0]}) == []
