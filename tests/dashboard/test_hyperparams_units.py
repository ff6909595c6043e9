"""Live hyperparameters on the dashboard's side, piece by piece: the specs a run declares, the
changes checked against them, their queue (pending, sent, applied), and the fixed ranges."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard.hyperparams import (
    DynamicParamSpec,
    HyperParamError,
    HyperParamStore,
    change_refusal,
    check_declarations,
    dynamic_specs,
    ended,
    is_run_itself,
    param_state,
    reported_values,
    validate_changes,
)

LR = DynamicParamSpec("learning_rate", "float", 2.5e-4, 0.0, 1e-2)
EPOCHS = DynamicParamSpec("epochs", "int", 4, 1, 16)
SPECS = {s.key: s for s in (LR, EPOCHS)}


def test_specs_come_from_labml_configs() -> None:
    configs: dict[str, Any] = {
        "learning_rate": {"name": "learning_rate", "computed": {"type": "DynamicSchedule", "default": 2.5e-4,
                                                                "range": [0, 0.01], "dynamic_type": "float"}},
        "gamma": {"name": "gamma", "computed": 0.99},
        "broken": {"name": "broken", "computed": {"type": "DynamicSchedule", "range": "x"}},
    }
    assert dynamic_specs(configs) == {"learning_rate": DynamicParamSpec("learning_rate", "float", 2.5e-4, 0, 0.01)}


@given(st.floats(min_value=0.0, max_value=1e-2))
def test_floats_in_range_are_accepted(value: float) -> None:
    assert validate_changes(SPECS, {"learning_rate": value}) == {"learning_rate": value}


@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda v: not 0.0 <= v <= 1e-2))
def test_floats_out_of_range_or_not_finite_are_refused(value: float) -> None:
    with pytest.raises(HyperParamError, match="learning_rate"):
        validate_changes(SPECS, {"learning_rate": value})


@given(st.integers(min_value=-100, max_value=100))
def test_integers_are_checked_against_their_range(value: int) -> None:
    if 1 <= value <= 16:
        assert validate_changes(SPECS, {"epochs": value}) == {"epochs": value}
    else:
        with pytest.raises(HyperParamError, match=r"epochs: -?\d+: expected a value in \[1, 16\]"):
            validate_changes(SPECS, {"epochs": value})


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6), st.booleans(), st.none(), st.text(max_size=3)))
def test_the_dashboard_and_the_trainer_decide_by_one_rule(value: Any) -> None:
    """The dashboard refuses exactly what the trainer would refuse, for a run that declared
    configs/ppo.py's ranges: both call configs/fields.py's `live_value_problem_in`."""
    from configs.ppo import LIVE_RANGES, PPOConfig, live_value_problem
    for name, (low, high) in LIVE_RANGES.items():
        integral = isinstance(getattr(PPOConfig(), name), int)
        spec = DynamicParamSpec(name, "int" if integral else "float", getattr(PPOConfig(), name), low, high)
        try:
            spec.coerce(value)
            refused = False
        except HyperParamError:
            refused = True
        assert refused == (live_value_problem(name, value) is not None), (name, value)


def test_an_integer_past_any_float_is_refused_not_raised() -> None:
    from configs.ppo import live_value_problem
    assert live_value_problem("epochs", 10**400) == "a value in [1, 32]"
    with pytest.raises(HyperParamError, match=r"epochs: 1000000000.*: expected a value in \[1, 16\]"):
        validate_changes(SPECS, {"epochs": 10**400})


def test_an_integral_value_sent_as_a_whole_float_is_taken_as_the_trainer_takes_it() -> None:
    assert validate_changes(SPECS, {"epochs": 2.0}) == {"epochs": 2}


@pytest.mark.parametrize("changes, message", [
    ({"epochs": 2.5}, "expected an integer"),
    ({"epochs": True}, "expected an integer"),
    ({"learning_rate": "1e-3"}, "expected a number"),
    ({"learning_rate": None}, "expected a number"),
    ({"gamma": 0.9}, "not a live hyperparameter"),
    ({}, "non-empty JSON object"),
    ([1], "non-empty JSON object"),
    ({"learning_rate": 1e-3, "epochs": 99}, "epochs"),  # all or nothing
])
def test_bad_changes_are_refused(changes: Any, message: str) -> None:
    with pytest.raises(HyperParamError, match=message):
        validate_changes(SPECS, changes)


def test_integer_for_a_float_parameter_becomes_a_float() -> None:
    value = validate_changes({"clip": DynamicParamSpec("clip", "float", 0.1, 0, 1)}, {"clip": 1})["clip"]
    assert value == 1.0 and isinstance(value, float)


def test_pending_changes_are_delivered_once_and_persist(tmp_path: Path) -> None:
    path = tmp_path / "hp.json"
    store = HyperParamStore(path)
    store.add_pending("run", {"learning_rate": 1e-3})
    store.add_pending("run", {"epochs": 3})
    assert HyperParamStore(path).get("run")["pending"] == {"learning_rate": 1e-3, "epochs": 3}  # reloaded
    assert store.take_pending("run") == {"learning_rate": 1e-3, "epochs": 3}
    assert store.take_pending("run") == {}
    sent = {"learning_rate": 1e-3, "epochs": 3}
    assert HyperParamStore(path).get("run") == {"pending": {}, "sent": sent, "delivered": sent, "reported": {}}


def test_a_sent_change_is_applied_only_when_the_run_reports_using_it(tmp_path: Path) -> None:
    store = HyperParamStore(tmp_path / "hp.json")
    store.set_reported("run", {"epochs": 4.0})
    store.add_pending("run", {"epochs": 6})
    store.take_pending("run")
    # labml still delivers what the run tracked before it received the change: not applied yet.
    store.set_reported("run", {"epochs": 4.0})
    assert store.get("run")["sent"] == {"epochs": 6} and store.get("run")["reported"] == {"epochs": 4.0}
    store.set_reported("run", {"epochs": 6.0})  # labml reports every value as a float
    assert store.get("run")["sent"] == {} and store.get("run")["reported"] == {"epochs": 6.0}
    assert HyperParamStore(tmp_path / "hp.json").get("run")["sent"] == {}  # persisted


def test_pending_changes_of_an_ended_run_are_dropped(tmp_path: Path) -> None:
    store = HyperParamStore(tmp_path / "hp.json")
    store.add_pending("run", {"epochs": 6})
    assert store.drop_pending("run") == {"epochs": 6}
    assert store.get("run")["pending"] == {} and store.take_pending("run") == {}
    assert ended([{"status": {"status": "completed"}}]) and ended([{"status": {"status": "interrupted"}}])
    assert not ended([{"status": {"status": "in progress"}}]) and not ended([{"track": {}}])


@pytest.mark.parametrize(("status", "refused"), [("in progress", False), ("no response", False),
                                                 ("completed", True), ("interrupted", True), ("crashed", True),
                                                 ("unknown", True)])
def test_only_a_running_run_takes_changes(status: str, refused: bool) -> None:
    refusal = change_refusal("abc", status)
    assert (refusal is not None) == refused
    if refused:
        assert refusal.startswith(f"run abc is {status}: a live change reaches only a running run")


@pytest.mark.parametrize(("stored", "rank", "main_rank", "itself"), [
    ("victim", 0, 0, True),  # labml's client of a one-process run
    ("victim_1", 1, 1, False),  # the spoof: rank 1 of 2 claiming to be the main rank
    ("victim", 1, 1, False),  # world_size 1 claiming rank 1 as the main rank
    ("victim_1", 1, 0, False),  # a real second rank
])
def test_only_the_run_itself_takes_its_changes(stored: str, rank: int, main_rank: int, itself: bool) -> None:
    assert is_run_itself("victim", stored, rank, main_rank) is itself


def test_an_integer_parameter_is_reported_as_an_integer() -> None:
    spec = DynamicParamSpec("epochs", "int", 4, 1, 16)
    state = {"pending": {}, "sent": {"epochs": 6}, "delivered": {"epochs": 6}, "reported": {"epochs": 4.0}}
    shown = param_state(spec, state)
    assert shown["applied"] == 4 and isinstance(shown["applied"], int) and shown["sent"] == 6
    assert param_state(spec, {**state, "reported": {}})["applied"] is None
    assert param_state(spec, {**state, "reported": {}})["current"] == 4


def test_reported_values_take_the_last_hp_value() -> None:
    packets = [{"track": {"hp.learning_rate": {"step": [1, 2], "value": [1e-4, 2e-4]}, "loss": {"value": [1.0]}}},
               {"track": {"hp.epochs": {"step": [3], "value": [5]}, "hp.bad": {"value": ["x"]},
                          "hp.undeclared": {"step": [3], "value": [7.0]}}}, "junk"]
    assert reported_values(packets, {"learning_rate", "epochs", "bad"}) == {"learning_rate": 2e-4, "epochs": 5}
    assert reported_values(packets, {"epochs"}) == {"epochs": 5}


def test_a_report_drops_the_reported_values_of_undeclared_keys(tmp_path: Path) -> None:
    # A store written while any hp.* name was kept: the run's next report keeps its declared ones.
    path = tmp_path / "hp.json"
    path.write_text('{"run":{"delivered":{},"pending":{},"reported":{"epochs":4.0,"junk0":1.0,"junk1":2.0},"sent":{}}}')
    store = HyperParamStore(path)
    store.set_reported("run", {"epochs": 4.0}, {"epochs", "learning_rate"})
    assert HyperParamStore(path).get("run")["reported"] == {"epochs": 4.0}


def _config(computed: Any, name: str = "lr") -> dict[str, Any]:
    return {"name": name, "computed": computed}


DYNAMIC = {"type": "DynamicSchedule", "default": 0.1, "range": [0, 1], "dynamic_type": "float"}


def test_live_ranges_are_fixed_by_the_first_configs() -> None:
    # The first configs declare; in the same body or later, the same declaration passes.
    check_declarations({}, [{"configs": {"lr": _config(DYNAMIC), "g": _config(0.9, "g")}}, {"configs": {"lr": _config(DYNAMIC)}}])
    check_declarations({"lr": _config(DYNAMIC)}, [{"configs": {"lr": _config(DYNAMIC), "g": _config(0.5, "g")}}])
    for later in ({"lr": _config({**DYNAMIC, "range": [0, 2]})}, {"lr": _config(0.1)}, {"lr": _config(DYNAMIC, "other")},
                  {"g": _config(DYNAMIC, "g")}, {"x": _config(DYNAMIC, "lr")}):
        with pytest.raises(HyperParamError, match="a later packet cannot change it"):
            check_declarations({"lr": _config(DYNAMIC), "g": _config(0.9, "g")}, [{"configs": later}])
        with pytest.raises(HyperParamError, match="a later packet cannot change it"):
            check_declarations({}, [{"configs": {"lr": _config(DYNAMIC), "g": _config(0.9, "g")}}, {"configs": later}])
    with pytest.raises(HyperParamError, match=re.escape("field configs.lr.computed: expected a DynamicSchedule")):
        check_declarations({}, [{"configs": {"lr": _config({**DYNAMIC, "default": 2})}}])
