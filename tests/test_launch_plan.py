"""A launch is planned whole before anything starts (experiments/run/plan.py): its config made in one
merge and one validation (configs/launch.py), and a resume's plan read from the run folder without
deleting or printing anything; the run then acts on it."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from configs.fields import ConfigError
from configs.launch import launch_config
from configs.ppo import PPOConfig
from experiments.run.plan import plan_launch
from tests.conftest import REPO, Cli, run_once
from tests.test_experiment import SMOKE


def test_a_new_run_layers_the_command_line_over_the_defaults_then_groups_its_games_by_the_cores() -> None:
    config, chosen = launch_config({"learning_rate": 1e-3}, cores=2)
    assert (config.learning_rate, config.n_workers, config.envs_per_worker) == (1e-3, 2, 4)  # 8 games on 2 cores: 2 × 4
    assert chosen == {"envs_per_worker": "2 usable cores", "n_workers": "2 usable cores"}
    config, chosen = launch_config({"n_workers": 4}, cores=2)  # the command line chose: the machine does not
    assert (config.n_workers, config.envs_per_worker, chosen) == (4, 1, {})
    config, chosen = launch_config({}, cores=None)  # a command that only reads a config: as the defaults say
    assert (config.n_workers, config.envs_per_worker, chosen) == (8, 1, {})


def test_a_refusal_describes_the_batch_as_this_machine_groups_it() -> None:
    # 8 games grouped 2 × 4 on 2 cores, 128 steps each: a batch of 1,024 that 3 does not divide.
    with pytest.raises(ConfigError) as refused:
        launch_config({"minibatches": 3}, cores=2)
    assert str(refused.value) == ("--minibatches 3: expected a divisor of the batch size 1024 "
                                  "(n_workers 2 × envs_per_worker 4 × worker_steps 128)")


def test_a_resume_layers_the_command_line_over_the_runs_own_config() -> None:
    saved = PPOConfig(n_workers=2, envs_per_worker=4, learning_rate=5e-4, dashboard="http://127.0.0.1:5005")
    config, chosen = launch_config({"device": "cpu", "n_workers": 4}, cores=64, saved=saved)
    # The run's own values; its games regrouped 4 × 2 as asked (never by the cores); no dashboard unless named again.
    assert (config.learning_rate, config.n_workers, config.envs_per_worker, config.dashboard, chosen) == (5e-4, 4, 2, None, {})
    with pytest.raises(ConfigError, match=r"--learning-rate 0.001: expected the resumed run's own value 0.0005"):
        launch_config({"learning_rate": 1e-3}, cores=2, saved=saved)


def folder_state(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder`: its mode and the hash of its bytes."""
    return {str(p.relative_to(folder)): (p.lstat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_planning_a_resume_changes_nothing_and_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Any finished run of 2 games as 2 × 1: the smoke run (2 updates), made once a session for the
    # tests that read or resume it (conftest.run_once).
    summary = run_once(Cli(), tmp_path, *SMOKE)
    run_dir = Path(summary["run_dir"])
    # What the run's dead process left: a stale run.pid, and a temp file of a write it was killed in.
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    (run_dir / "run.pid").write_text(str(dead))
    (run_dir / ".summary.json.k2m9x0qa.tmp").write_text("{")
    before = folder_state(run_dir)
    capsys.readouterr()
    plan = plan_launch({"data_dir": str(tmp_path), "n_workers": 1}, resume=summary["run_uuid"][:8])  # the dashboard's id
    assert folder_state(run_dir) == before  # nothing deleted or written: the run removes them when it starts
    assert capsys.readouterr() == ("", "")  # and nothing printed: the notes are the plan's, for the run to say
    assert plan.run_dir == run_dir and plan.resume is not None and plan.resume.checkpoint.update == 2
    assert plan.run_uuid == summary["run_uuid"]
    assert (plan.config.n_workers, plan.config.envs_per_worker) == (1, 2)
    assert any(note.startswith("note: the run's 2 games ran as 2 × 1 and go on as 1 × 2") for note in plan.notes), plan.notes


@pytest.mark.slow
def test_the_plan_is_immutable_all_the_way_down_and_the_trainer_copies_its_tensors_in(tmp_path: Path) -> None:
    import dataclasses

    import torch

    from game.vector import game_specs, make_pool
    from ppo.devices import resolve_device
    from ppo.seeding import derive_seeds
    from ppo.trainer import Trainer

    summary = run_once(Cli(), tmp_path, *SMOKE)
    plan = plan_launch({"data_dir": str(tmp_path), "backend": "serial"}, resume=summary["run_uuid"])
    assert plan.resume is not None
    for frozen, name in ((plan, "notes"), (plan.config, "learning_rate"), (plan.resume, "notes"), (plan.resume.checkpoint, "update")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, name, None)
    with pytest.raises(TypeError):
        plan.machine_choices["n_workers"] = "mine"  # type: ignore[index]
    held = plan.resume.checkpoint
    before = {key: value.clone() for key, value in held.optimizer["state"][0].items()}
    model_before = {key: value.clone() for key, value in held.model.items()}
    config, seeds = plan.config, derive_seeds(plan.config.seed, plan.config.n_envs)
    with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
        trainer = Trainer(config, pool, seeds, resolve_device("cpu"), on_event=lambda line: None)
        trainer.load_state_dict(held)
        trainer.iteration()  # Adam steps its moments and the parameters
        stepped = trainer.optimizer.state_dict()["state"][0]["exp_avg"]
    assert not torch.equal(stepped, before["exp_avg"])  # so a step happened: the plan's copies must not have moved
    assert all(torch.equal(held.optimizer["state"][0][key], value) for key, value in before.items())
    assert all(torch.equal(held.model[key], value) for key, value in model_before.items())


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="the walk names a nested function's holder from Python 3.11")
def test_both_start_up_paths_stay_within_their_counted_stays_files_and_climbs(tmp_path: Path) -> None:
    # docs/architecture.md "Start-up, call by call", counted by its tool (tools/ is no package) in
    # this process, with the docs' options: from `main` to the `TrainingRun` of a new run and of a
    # resume of the smoke run.
    import importlib.util

    spec = importlib.util.spec_from_file_location("startup_walk", REPO / "tools" / "startup_walk.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    summary = run_once(Cli(), tmp_path, *SMOKE)
    for argv, (most_stays, most_files, most_climbs) in (
            (["--data-dir", str(tmp_path / "new"), "--updates", "2", "--n-workers", "2", "--worker-steps", "16"], (17, 10, 3)),
            (["--data-dir", str(tmp_path), "--resume", summary["run_uuid"]], (29, 15, 7))):
        stays, refused = tool.walk(argv)
        assert refused is None, (argv, stays)
        assert (stays[0].file, stays[0].calls[0]) == ("experiments/breakout.py", "main")
        assert (stays[-1].file, stays[-1].calls[-1]) == ("experiments/run/lifecycle.py", "TrainingRun.__init__")
        counts = (len(stays), len({s.file for s in stays}), tool.climbs(stays))
        assert all(n <= most for n, most in zip(counts, (most_stays, most_files, most_climbs), strict=True)), (counts, stays)
    x, y = "experiments/x.py", "configs/y.py"  # the rule itself: consecutive functions in one file are one stay
    assert tool.stays_of([(x, "f"), (x, "g"), (y, "h"), (x, "k")]) == [tool.Stay(x, ("f", "g"), 3), tool.Stay(y, ("h",), 1),
                                                                        tool.Stay(x, ("k",), 3)]
    assert tool.climbs(tool.stays_of([(x, "f"), (y, "h"), (x, "k")])) == 1
    assert not (tmp_path / "new").exists()  # the walk started and wrote nothing
