"""The comparison's parts that need no run: the address commands print, what counts as a changed
live value, a run's training time and wall clock, and the runs list's cap on ticks."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import REPO

from dashboard.client import MAX_COMPARED_RUNS, compare_line
from dashboard.compare import changed_live_values, seed_of, training_seconds
from dashboard.run_clock import MAX_NOTES, RunClock, notes_of, seconds_at, thinned
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


def test_the_wall_clock_dates_each_point_by_the_request_that_brought_it() -> None:
    # Started at t=1000; one request brought steps 0 to 64 at t=1010, the next 128 and 192 at t=1030.
    notes = notes_of([{"time": 1.0, "track": {"loss": {"step": [0, 32, 64], "value": [1, 2, 3]}}}], 1010.0) + \
        notes_of([{"time": 2.0, "track": {"loss": {"step": [128], "value": [1]}, "sps": {"step": [192], "value": [9]}}},
                  {"time": 3.0, "status": {}}], 1030.0)
    assert notes == [(0.0, 1010.0), (64.0, 1010.0), (128.0, 1030.0), (192.0, 1030.0)]  # each packet's first and last step
    # A point is dated by its request (0 to 64 at 1010 s, so 10 s); 96 lies between two requests:
    # halfway from 64 (10 s) to 128 (30 s), 20 s; 256 is not noted yet, -1 before the first note, NaN no step.
    assert seconds_at(notes, 1000.0, [0, 32, 64, 96, 128, 192, 256, -1, math.nan]) == \
        [10.0, 10.0, 10.0, 20.0, 30.0, 30.0, None, None, None]
    # A run resumed an hour later: its next points are dated by their own request, not spread over the pause.
    resumed = [*notes, *notes_of([{"time": 4.0, "track": {"loss": {"step": [200, 264], "value": [1, 1]}}}], 4630.0)]
    assert seconds_at(resumed, 1000.0, [192, 200, 264]) == [30.0, 3630.0, 3630.0]
    # A history a resumed run posts (no client time) has no clock: its steps get none, the next
    # request's points its arrival.
    history = [*notes, *notes_of([{"track": {"loss": {"step": [256, 320], "value": [1, 1]}}}], 1100.0),
               *notes_of([{"time": 4.0, "track": {"loss": {"step": [384, 448], "value": [1, 1]}}}], 1200.0)]
    assert history[4:] == [(320.0, None), (384.0, 1200.0), (448.0, 1200.0)]
    assert seconds_at(history, 1000.0, [256, 320, 352, 384, 448]) == [None, None, 200.0, 200.0, 200.0]
    # No note at all (a run from before the clock): no point has a clock. A start after a point's
    # arrival (another machine's clock): 0, never below.
    assert seconds_at([], 1000.0, [0, 64]) == [None, None]
    assert seconds_at(notes, 1020.0, [0, 192]) == [0.0, 10.0]


def test_a_long_runs_clock_is_thinned_to_every_second_note_keeping_the_last_and_the_no_clock_marks() -> None:
    notes: list[tuple[float, float | None]] = [(float(i), float(i)) for i in range(MAX_NOTES + 1)]
    notes[5] = (5.0, None)  # a history's mark
    kept = thinned(notes)
    assert kept[:4] == [(0.0, 0.0), (2.0, 2.0), (4.0, 4.0), (5.0, None)] and kept[-1] == (float(MAX_NOTES), float(MAX_NOTES))
    assert len(kept) == MAX_NOTES // 2 + 2
    assert seconds_at(kept, 0.0, [7.0]) == [7.0]  # a straight line still reads a straight run exactly


def test_a_runs_clock_is_kept_in_a_file_of_its_own_read_back_checked_and_removed(tmp_path: Path) -> None:
    clock = RunClock(tmp_path / "run_clock")
    clock.note("run-a", [{"time": 1.0, "track": {"loss": {"step": [0, 10], "value": [1, 1]}}}], 1005.0)
    clock.note("run-b", [{"status": {}}], 1006.0)  # no points: nothing noted, no file
    assert json.loads((tmp_path / "run_clock" / "run-a.json").read_text()) == [[0.0, 1005.0], [10.0, 1005.0]]
    assert sorted(p.name for p in (tmp_path / "run_clock").iterdir()) == ["run-a.json"]
    again = RunClock(tmp_path / "run_clock")  # a restarted dashboard
    assert again.seconds("run-a", 1000.0, [5, 10]) == [5.0, 5.0] and again.seconds("run-a", None, [5]) == [None]
    (tmp_path / "run_clock" / "run-c.json").write_text('[[1, "noon"]]')
    with pytest.raises(ValueError, match=r"run-c\.json: not a run clock file"):
        again.seconds("run-c", 0.0, [1])
    again.forget("run-a")
    assert not (tmp_path / "run_clock" / "run-a.json").exists() and again.seconds("run-a", 1000.0, [5]) == [None]
    with pytest.raises(ValueError, match="not a run uuid"):  # never a file name of anything else
        again.seconds("../run-a", 1000.0, [5])
