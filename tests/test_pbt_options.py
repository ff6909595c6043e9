"""`python -m experiments.pbt`'s input checks and its perturbation of live values, without Ray."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from configs.ppo import live_value_problem
from experiments.pbt import main
from experiments.pbt.cli import plan_resume
from experiments.pbt.explore import perturbed
from experiments.pbt.state import Population
from ray_setup.installed import ray_installed
from tests import process_table
from tests.conftest import Cli, refused_in_process
from tests.pbt_support import TINY


@pytest.mark.parametrize(("values", "low", "high"), [
    ({"learning_rate": 1e-2, "clip_range": 1.0, "epochs": 32}, {"learning_rate": 0.008, "clip_range": 0.8, "epochs": 26},
     {"learning_rate": 1e-2, "clip_range": 1.0, "epochs": 32}),  # at the top of each range: × 1.2 stays there
    ({"learning_rate": 0.0, "clip_range": 0.05, "epochs": 1}, {"learning_rate": 0.0, "clip_range": 0.04, "epochs": 1},
     {"learning_rate": 0.0, "clip_range": 0.06, "epochs": 2}),  # an integer moves by at least 1, never below 1
])
def test_explore_stays_in_the_configs_ranges(values: dict[str, Any], low: dict[str, Any], high: dict[str, Any]) -> None:
    seen = [perturbed(values, list(values), np.random.default_rng(seed)) for seed in range(40)]
    for name in values:
        assert {s[name] for s in seen} == {low[name], high[name]}, name  # both factors drawn, each clipped
        assert all(live_value_problem(name, s[name]) is None for s in seen)


@pytest.mark.parametrize(("args", "message"), [
    (["--population", "1", "--interval", "2"], "--population 1: expected an integer from 2 to 1_024"),
    (["--population", "1025", "--interval", "2"], "--population 1025: expected an integer from 2 to 1_024"),
    (["--interval", "2"], "--population: expected an integer from 2 to 1_024, none given"),
    (["--population", "2"], "--interval: expected a number of updates, none given"),
    (["--population", "2", "--interval", "2", "--cpus-per-member", "nan"], "--cpus-per-member nan: expected a number > 0"),
    (["--population", "2", "--interval", "2", "--cpus-per-member", "0"], "--cpus-per-member 0: expected a number > 0"),
    (["--population", "2", "--interval", "2", "--max-retries", "-1"], "--max-retries -1: expected an integer from 0 to 100"),
    (["--population", "2", "--interval", "0"], "--interval 0: expected an integer from 1 to 1_000_000_000"),
    (["--population", "2", "--interval", "6"], "--interval 6: expected an integer from 1 to 5"),
    (["--population", "2", "--interval", "2", "--explore", "gamma"], "--explore gamma: expected distinct live"),
    (["--resume", "/nonexistent/pbt-x"], "--resume /nonexistent/pbt-x: expected a population folder (one holding population.json)"),
])
def test_bad_population_or_interval_is_one_line_before_ray_starts(args: list[str], message: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*args, *TINY, "--data-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_version_and_help_name_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--version", "--help"):
        with pytest.raises(SystemExit) as exit_:
            main([flag], prog="breakout-ppo pbt")
        assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("breakout-ppo ") and "usage: breakout-ppo pbt [-h]" in out and "--population N" in out


def test_a_resumed_population_keeps_its_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "population.json").write_text("{}")
    for extra, option in ((["--interval", "5"], "--interval"), (["--learning-rate", "1e-3"], "--learning-rate")):
        with pytest.raises(SystemExit) as exit_:
            main(["--resume", str(tmp_path), *extra])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [f"error: {option}: a resumed population keeps its own settings "
                                            "(only --ray-address may be given with --resume)"], err


# ---- a crafted population folder: what --resume reads and plans before anything starts -------------

DASHBOARD = "http://127.0.0.1:5005"


def crafted_population(tmp_path: Path, **fields: Any) -> Path:
    """A population folder as `pbt --dashboard DASHBOARD … TINY` leaves it when stopped in its first
    segment, its record written by the population's own writer; `fields` replace the record's."""
    data = tmp_path / "runs"
    folder = data / "breakout" / "pbt-crafted"
    folder.mkdir(parents=True)
    fixed = {"worker_steps": 16, "n_workers": 1, "envs_per_worker": 2, "backend": "serial", "total_env_steps": 192,
             "epochs": 1, "minibatches": 2, "torch_threads": 1, "dashboard": DASHBOARD, "data_dir": str(data)}
    members = [{"run_uuid": "0a" * 16, "seed": 0}, {"run_uuid": "1b" * 16, "seed": 1}]
    population = Population(str(folder), 3, ["learning_rate"], 6, 32, fixed, members, 1.0, 1, private_dashboard=False,
                            first_leg={"dashboard": DASHBOARD, "ray_address": None})
    for name, value in fields.items():
        setattr(population, name, value)
    population.save()
    return folder


def test_a_crafted_population_is_one_the_checks_accept(tmp_path: Path) -> None:
    # The folder the tests below change one thing of: as it is, every field passes and reads back.
    folder = crafted_population(tmp_path)
    population = Population.load(folder)
    assert (population.folder, population.fixed["data_dir"]) == (str(folder.resolve()), str(tmp_path / "runs"))
    assert population.first_leg == {"dashboard": DASHBOARD, "ray_address": None} and population.members[1]["seed"] == 1


def test_a_folder_named_population_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "population.json").mkdir()  # read as a file, it raised IsADirectoryError: a traceback, no refusal
    line = refused_in_process(capsys, ["--resume", str(tmp_path)], main)
    assert line == f"error: --resume {tmp_path}: population.json is a folder: expected a regular file, a population's record"


@pytest.mark.parametrize(("data_dir", "generation", "message"), [
    # Well formed, and no folder anyone can write to: refused here, not by every member as it starts.
    ("/proc/self", 0, "population.json's fixed options: --data-dir /proc/self: expected a folder this user can write "
                      "to (/proc/self: No such file or directory)"),
    ("{tmp}/gone", 0, "population.json's fixed.data_dir is \"{tmp}/gone\": expected an existing folder, the one that "
                      "holds the members' runs"),
    # A segment was done, so each member has a run: an empty data dir is not the members'.
    ("{tmp}", 1, "population.json's fixed.data_dir is \"{tmp}\": expected the folder that holds the members' runs "
                 f"(member 0's run {'0a' * 16} is not in it)"),
])
def test_population_json_data_dir_is_planned_as_the_command_lines(tmp_path: Path, data_dir: str, generation: int, message: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    folder = crafted_population(tmp_path, generation=generation)
    record = json.loads((folder / "population.json").read_text())
    record["fixed"]["data_dir"] = data_dir.format(tmp=tmp_path)
    (folder / "population.json").write_text(json.dumps(record))
    before = sorted(tmp_path.rglob("*"))
    line = refused_in_process(capsys, ["--resume", str(folder)], main)
    assert line == f"error: --resume {folder}: {message.format(tmp=tmp_path)}"
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing started


@pytest.mark.parametrize(("first_leg", "message"), [
    ({"dashboard": 5, "ray_address": None}, "population.json's first_leg is {\"dashboard\": 5, \"ray_address\": null}: "
                                            'expected null, or a JSON object of "dashboard" and "ray_address"'),
    ({"dashboard": None}, "population.json's first_leg is {\"dashboard\": null}: expected null, or a JSON object of "),
])
def test_a_bad_first_leg_is_one_line(tmp_path: Path, first_leg: Any, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    folder = crafted_population(tmp_path)
    record = json.loads((folder / "population.json").read_text())
    (folder / "population.json").write_text(json.dumps({**record, "first_leg": first_leg}))
    assert refused_in_process(capsys, ["--resume", str(folder)], main).startswith(f"error: --resume {folder}: {message}")


def test_ray_address_on_a_resume_is_checked_as_on_a_new_population(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private = crafted_population(tmp_path, private_dashboard=True, first_leg={"dashboard": None, "ray_address": None})
    assert refused_in_process(capsys, ["--resume", str(private), "--ray-address", "10.0.0.7:6379"], main) == (
        "error: --ray-address 10.0.0.7:6379: needs a population whose members report to a dashboard every node can "
        "reach; this one's is its own, on this machine (it was started without --dashboard)")
    assert refused_in_process(capsys, ["--resume", str(private), "--ray-address", "two words"], main) == (
        "error: --ray-address two words: expected auto, HOST:PORT or ray://HOST:PORT")  # checked on a resume too


def test_a_resume_says_where_its_dashboard_and_cluster_differ_from_the_first_legs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = crafted_population(tmp_path)
    args = argparse.Namespace(resume=str(folder), population=None, interval=None, explore=None)
    assert plan_resume(args, {}, None).first_leg == {"dashboard": DASHBOARD, "ray_address": None}
    assert capsys.readouterr().err == ""  # the same dashboard and a private Ray again: nothing to say
    record = json.loads((folder / "population.json").read_text())
    record["fixed"]["dashboard"] = "http://user:secret@127.0.0.1:5006"  # edited between the legs
    (folder / "population.json").write_text(json.dumps(record))
    population = plan_resume(args, {}, "10.0.0.7:6379")
    assert capsys.readouterr().err.splitlines() == [
        f"note: the members report to http://127.0.0.1:5006 (population.json's fixed.dashboard); the population's first "
        f"leg's reported to {DASHBOARD}",
        "note: this leg runs on the Ray cluster at 10.0.0.7:6379 (--ray-address); the population's first leg ran on a "
        "Ray of its own on this machine"]
    assert population.first_leg == {"dashboard": DASHBOARD, "ray_address": None}  # the first leg's stays the first's


@pytest.mark.skipif(not ray_installed(), reason='Ray is not installed (pip install -e ".[ray]")')
def test_a_ctrl_c_while_the_population_s_dashboard_starts_is_one_line_and_leaves_nothing(cli: Cli, tmp_path: Path) -> None:
    """A Ctrl-C while the population's own dashboard started (before its first line, before Ray)
    ended in a traceback and exit 1. It is a person's stop as at any other moment: one line that
    says what was kept, exit 130, the lineage's path last, and the dashboard gone."""
    process = cli.start("experiments.pbt", "--population", "2", "--interval", "1", "--updates", "2", "--n-workers", "1",
                        "--worker-steps", "16", "--data-dir", str(tmp_path / "runs"))

    def dashboard_started() -> bool:
        for pid in process_table.children(process.pid):
            with contextlib.suppress(psutil.Error):  # a child gone meanwhile
                if "experiments.dashboard" in psutil.Process(pid).cmdline()[:3]:
                    return True
        return False

    deadline = time.monotonic() + 300
    while not dashboard_started():  # the event: its dashboard's process runs
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no dashboard started within 300 s"
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-3000:]
    folder = Path(out.splitlines()[-1]).parent
    assert err.splitlines() == [f"pbt stopped before any member ran; nothing was saved ({folder} holds no population.json)"]
    assert cli.leftovers() == []
