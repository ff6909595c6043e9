"""Faults a run must survive: each one injected for real."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from configs.ppo import PPOConfig
from game.vector import PipePool, RestartPolicy, WorkerKeepsFailing, game_specs
from ppo.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ppo.seeding import derive_seeds
from ppo.trainer import NonFiniteLoss, Trainer
from tests import forked_run
from tests.conftest import REPO, Cli, refused_in_process, run_once, wait_for_file
from tests.process_table import is_alive
from tests.test_experiment import TINY, summary_of

# One finished update of a small run, made once (`run_once`) for the tests that attack its checkpoint.
ONE_UPDATE = ("--updates", "1", *TINY)
# 3 updates of 4 games × 1 per process, checkpointed after each: run uninterrupted (made once, by
# `run_once`) it is the reference that resumes of its split run (`split_run`), as it ran or regrouped,
# must reproduce bit for bit.
STRAIGHT = ("--updates", "3", "--n-workers", "4", "--worker-steps", "16", "--minibatches", "2", "--epochs", "1", "--seed", "5",
            "--checkpoint-every", "1")


def make_trainer(pool_stack, **overrides) -> tuple[Trainer, PipePool]:
    config = PPOConfig(n_workers=2, worker_steps=16, minibatches=2, epochs=1, **overrides)
    seeds = derive_seeds(config.seed, config.n_envs)
    pool = pool_stack.enter_context(PipePool(game_specs(config, seeds.env_seeds), timeout_s=config.worker_timeout,
                                             restarts=RestartPolicy(config.max_worker_restarts, config.restart_window)))
    pool.reset()
    trainer = Trainer(config, pool, seeds, torch.device("cpu"), on_event=lambda message: None)
    return trainer, pool


@pytest.fixture
def pool_stack():
    import contextlib
    with contextlib.ExitStack() as stack:
        yield stack


def test_killed_worker_is_replaced_and_training_goes_on(pool_stack) -> None:
    trainer, pool = make_trainer(pool_stack)
    trainer.iteration()
    victim = pool.worker_pids()[1]
    os.kill(victim, signal.SIGKILL)
    metrics = trainer.iteration()
    assert trainer.worker_restarts == 1 and metrics["worker_restarts"] == 1
    assert pool.worker_pids()[1] != victim
    assert trainer.update == 2 and trainer.env_steps == 2 * 32  # the broken rollout was redone whole
    assert not is_alive(victim)


def test_hung_worker_times_out_and_is_replaced(pool_stack) -> None:
    trainer, pool = make_trainer(pool_stack)
    # Only now the short timeout: the start and first reset of the games may take seconds on a busy
    # machine, and only the stopped worker may time out here.
    pool.timeout_s = 1.0
    hung = pool.worker_pids()[0]
    os.kill(hung, signal.SIGSTOP)
    # Once the hang is caught, a slow step on a busy machine must not count as another one.
    pool.on_restart = lambda message: setattr(pool, "timeout_s", 600.0)
    trainer.iteration()
    assert trainer.worker_restarts == 1 and pool.worker_pids()[0] != hung
    assert not is_alive(hung)


def test_a_worker_that_keeps_dying_stops_the_run_naming_it(pool_stack) -> None:
    trainer, pool = make_trainer(pool_stack, max_worker_restarts=1)
    os.kill(pool.worker_pids()[1], signal.SIGKILL)
    trainer.iteration()
    os.kill(pool.worker_pids()[1], signal.SIGKILL)
    with pytest.raises(WorkerKeepsFailing, match=r"worker 1 failed 2 times within 100 updates \(limit 1\).*worker 1 died"):
        trainer.iteration()


def test_nan_loss_leaves_the_model_as_it_was(pool_stack) -> None:
    trainer, _ = make_trainer(pool_stack)
    trainer.collect()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.rollout.rewards[0, 3] = np.nan
    # The message carries the values read back from the device (one readout per minibatch).
    with pytest.raises(NonFiniteLoss, match=r"non-finite loss \(nan\) or gradient norm \(nan\); update not applied"):
        trainer.optimize(trainer.schedule())
    for p, q in zip(trainer.model.parameters(), before, strict=True):
        assert torch.equal(p, q)
    assert not trainer.optimizer.state  # Adam's moments were rolled back too (none before the first step)


def test_nan_loss_can_be_skipped_and_counted(pool_stack) -> None:
    trainer, _ = make_trainer(pool_stack, skip_nonfinite=True)
    trainer.collect()
    trainer.rollout.rewards[0, 3] = np.inf
    trainer.optimize(trainer.schedule())
    # GAE spreads the inf over env 0's advantages; advantage normalisation makes every minibatch
    # that holds one of them NaN, so all are skipped and counted, and the model stays finite.
    assert trainer.nonfinite_skipped >= 1
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_full_disk_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "checkpoint.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(3)}, "config": {}, "update": 1})
    # A child whose file-size limit is 4 KiB gets EFBIG writing a 1 MB checkpoint: a full disk.
    code = (
        "import resource, signal, torch; from pathlib import Path\n"
        "from ppo.checkpoint import save_checkpoint, CheckpointError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        f"try:\n    save_checkpoint(Path({str(path)!r}), {{'model': {{'w': torch.zeros(250_000)}}, 'config': {{}}, 'update': 2}})\n"
        "except CheckpointError as e:\n    print('refused:', e)\n"
    )
    result = forked_run.run([sys.executable, "-c", code], cwd=REPO, text=True, timeout=600)
    assert "refused: could not write checkpoint" in result.stdout and "previous checkpoint is intact" in result.stdout, result.stderr
    assert load_checkpoint(path)["update"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temp file left behind


def test_corrupt_checkpoint_is_a_clear_error_and_nothing_is_overwritten(cli, tmp_path: Path) -> None:
    summary = run_once(cli, tmp_path, *ONE_UPDATE)
    checkpoint = Path(summary["checkpoint"])
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[: len(data) // 2])
    result = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"error: {checkpoint}: expected a checkpoint written by python -m experiments.breakout "
                                            f"(checkpoint {checkpoint} is corrupt or truncated")
    assert checkpoint.read_bytes() == data[: len(data) // 2]
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        torch.save({"something": 1}, tmp_path / "other.pt")
        load_checkpoint(tmp_path / "other.pt")
    assert cli.leftovers() == []


@pytest.fixture(scope="module")
def split_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """STRAIGHT's run, stopped by a real SIGTERM from outside after update 1's checkpoint: (its data
    dir, its summary). Made once for the two tests that resume it, each from a copy of its own."""
    cli, folder = Cli(), tmp_path_factory.mktemp("split")
    process = cli.start_held(folder / "held", *STRAIGHT, "--data-dir", str(folder / "runs"))
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert cli.leftovers() == []
    return folder / "runs", summary_of(stdout)


@pytest.fixture(scope="module")
def resumed_as_it_ran(split_run: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """`--resume` of a copy of the split run, its grouping untold: the resume whose parameters must be
    the uninterrupted run's (test_resume_is_exact), and the one that keeps the games as they ran
    (test_a_resume_regroups_the_games_for_its_machine)."""
    import shutil

    data_dir, interrupted = split_run
    copy = tmp_path_factory.mktemp("as-it-ran") / "runs"
    shutil.copytree(data_dir, copy)
    cli = Cli()
    resumed = cli.run("experiments.breakout", "--resume", interrupted["run_uuid"], "--data-dir", str(copy))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert cli.leftovers() == []
    return resumed


def test_resume_is_exact(cli, tmp_path: Path, split_run: tuple[Path, dict],
                         resumed_as_it_ran: subprocess.CompletedProcess[str]) -> None:
    """3 updates straight == k updates, SIGTERM, resume, 3 − k updates: the same parameters."""
    reference = load_checkpoint(Path(run_once(cli, tmp_path / "straight", *STRAIGHT)["checkpoint"]))
    _, interrupted = split_run
    assert interrupted["updates"] == 1
    final = load_checkpoint(Path(summary_of(resumed_as_it_ran.stdout)["checkpoint"]))

    assert final["update"] == reference["update"] == 3
    assert final["scores"] == reference["scores"] and final["games"] == reference["games"]
    for name, tensor in reference["model"].items():
        assert torch.equal(tensor, final["model"][name]), name
    assert cli.leftovers() == []


def test_a_resume_regroups_the_games_for_its_machine(cli, tmp_path: Path, split_run: tuple[Path, dict],
                                                     resumed_as_it_ran: subprocess.CompletedProcess[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Grouping is a speed setting of the machine (a run started on 16 cores as 8 × 1 and resumed on
    2 would otherwise keep 8 processes there): a resume regroups its games as --n-workers /
    --envs-per-worker say, never changing their number, and untold keeps them as they ran (suggesting
    this machine's grouping). When the network still acts for the same games at once (4 games: 4 × 1
    and 2 × 2 both act for 2 and 2), every number learned is the same as without the resume; 1 × 4
    acts for all 4 at once, and the note says so."""
    import shutil

    from configs.launch import grouped_for_cores
    from configs.machine import usable_cores
    from ppo.trainer import acting_groups
    reference = load_checkpoint(Path(run_once(cli, tmp_path / "straight", *STRAIGHT)["checkpoint"]))
    data_dir, interrupted = split_run  # 4 × 1, stopped after update 1 of 3
    uuid = interrupted["run_uuid"]
    shutil.copytree(data_dir, tmp_path / "told")
    run_files = {p: p.read_bytes() for p in (tmp_path / "told").rglob("*") if p.is_file()}
    for grouping, why in ((["--n-workers", "3"], "--n-workers 3: expected a divisor of the resumed run's 4 games"),
                          (["--n-workers", "2", "--envs-per-worker", "4"], "--n-workers 2 with --envs-per-worker 4: expected "
                           "n_workers × envs_per_worker = the resumed run's 4 games")):
        argv = ["--resume", uuid, *grouping, "--data-dir", str(tmp_path / "told")]
        if grouping == ["--n-workers", "3"]:  # the real command; the other by its main() in this process (refused before anything starts)
            refused = cli.run("experiments.breakout", *argv)
            assert refused.returncode == 2 and refused.stdout == "", refused.stderr[-2000:]
            line = refused.stderr.strip()
        else:
            line = refused_in_process(capsys, argv)
        assert line == f"error: {why} (a resume can regroup its games, not change their number)", line
        assert {p: p.read_bytes() for p in (tmp_path / "told").rglob("*") if p.is_file()} == run_files
    shutil.copytree(tmp_path / "told", tmp_path / "one-process")
    here = grouped_for_cores(PPOConfig(n_workers=4), usable_cores())  # 2 × 2 on 2 or 3 cores, 1 × 4 on one
    same = "the same batches, so nothing learned changes"
    other = "other batches, so from here the run is not bit for bit the one it would have been"
    for folder, grouping, (workers, per_worker) in (("told", ["--n-workers", "2"], (2, 2)),
                                                    ("untold", [], (4, 1)),
                                                    ("one-process", ["--envs-per-worker", "4"], (1, 4))):
        if folder == "untold":  # the same resume as test_resume_is_exact's, made once
            resumed = resumed_as_it_ran
        else:
            resumed = cli.run("experiments.breakout", "--resume", uuid, *grouping, "--data-dir", str(tmp_path / folder))
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        final = load_checkpoint(Path(summary_of(resumed.stdout)["checkpoint"]))
        assert (final["config"]["n_workers"], final["config"]["envs_per_worker"]) == (workers, per_worker), folder
        assert final["update"] == 3
        exact = len(acting_groups(PPOConfig(n_workers=workers, envs_per_worker=per_worker))) == 2
        if (workers, per_worker) != (4, 1):
            assert (f"note: the run's 4 games ran as 4 × 1 and go on as {workers} × {per_worker}; the network acts for "
                    f"them in {same if exact else other}") in resumed.stderr, (folder, resumed.stderr[-2000:])
        elif (here.n_workers, here.envs_per_worker) != (4, 1):
            regrouped_here = len(acting_groups(here)) == 2
            assert (f"note: the run's 4 games go on as 4 × 1, as they ran; for this machine's {usable_cores()} usable cores, "
                    f"--n-workers {here.n_workers} would group them {here.n_workers} × {here.envs_per_worker} ("
                    + ("nothing learned would change" if regrouped_here else "the network would act for them in other batches")
                    ) in resumed.stderr, resumed.stderr[-2000:]
        if exact:
            for name, tensor in reference["model"].items():
                assert torch.equal(tensor, final["model"][name]), (folder, name)
    assert cli.leftovers() == []


def test_checkpoint_of_another_model_is_refused_before_anything_starts(cli, tmp_path: Path) -> None:
    summary = run_once(cli, tmp_path, *ONE_UPDATE)
    path = Path(summary["checkpoint"])
    checkpoint = load_checkpoint(path)
    # A policy head for Pong's 6 actions where Breakout's 4 belong (a file copied between runs).
    checkpoint["model"]["policy.weight"] = torch.zeros(6, 512)
    checkpoint["model"]["policy.bias"] = torch.zeros(6)
    checkpoint["n_actions"] = 6
    save_checkpoint(path, checkpoint)
    before = {p: p.stat().st_mtime_ns for p in path.parent.parent.rglob("*") if p.is_file()}
    result = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {path}: expected a checkpoint written by python -m experiments.breakout "
                                     "(the checkpoint's model has 6 actions; Breakout has 4)")
    assert {p: p.stat().st_mtime_ns for p in path.parent.parent.rglob("*") if p.is_file()} == before
    assert cli.leftovers() == []


def test_chaos_script_end_to_end(cli) -> None:
    # The harness times each signal by the run's own updates (a random moment of the next one), so
    # 8 updates leave each leg updates to spare after its last signal: the second leg's kill lands in
    # update 3 or 4, the SIGTERM two checkpoints after it in update 5 or 6. Rollouts of 16 steps: the
    # size of an update is not the point, its count is.
    result = cli.run("tests.chaos", "--updates", "8", "--worker-steps", "16", "--interruptions", "1", "--kills", "1",
                     timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["params_match_uninterrupted"] is True
    assert report["worker_restarts"] == report["workers_killed"] == 1
    assert report["resumes"] >= 2 and report["updates_completed"] == 2 * 8 and report["processes_left"] == 0
    assert cli.leftovers() == []


def test_the_chaos_script_s_help_is_plain_text_and_a_bad_option_one_line(cli) -> None:
    result = cli.run("tests.chaos", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: python -m tests.chaos [-h] [--version]")
    assert not re.search(r"```|`|\*\*|^\s*#", result.stdout, re.M), result.stdout
    assert "1. interrupt and resume: SIGTERM mid-run" in result.stdout  # the list is kept as a list
    refused = cli.run("tests.chaos", "--updates", "0")
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", "error: --updates 0: expected an integer from 1 to 10_000\n")


def test_a_game_that_keeps_raising_stops_the_run_with_its_traceback(pool_stack) -> None:
    # An exception inside the game (here: an action the game does not have) is a worker failure
    # like a crash: the worker is replaced, and when it keeps failing the error names the worker
    # and carries the traceback from inside it.
    trainer, pool = make_trainer(pool_stack, max_worker_restarts=2)
    with pytest.raises(WorkerKeepsFailing) as error:
        pool.with_restarts(lambda: pool.step(np.array([0, 9])), tick=trainer.update)
    message = str(error.value)
    assert "worker 1 failed 3 times" in message and "worker 1 raised IndexError" in message
    assert "--- traceback in worker 1 ---" in message and "game/atari.py" in message
    assert trainer.worker_restarts == 2


def test_second_ctrl_c_stops_at_once_without_orphans(cli, tmp_path: Path) -> None:
    # The run is held busy after its first stop request (as if in a long update): only the second
    # Ctrl-C can end it, and it must, at once and without orphans.
    process = cli.start_held(tmp_path / "held", "--updates", "1000", *TINY, "--data-dir", str(tmp_path), until="forever")
    process.send_signal(signal.SIGINT)
    wait_for_file(tmp_path / "held.stop", process)  # the first one was seen
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 130 and "stopped at once" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert cli.leftovers() == []


UNCLOSED_POOL = """
import json, os, signal
from game.atari import GameSpec
from game.vector import PipePool
pool = PipePool([GameSpec(seed=1), GameSpec(seed=2)])
pool.reset()
os.killpg(os.getpgid(0), signal.SIGTERM)  # every process of the group; the workers ignore it
pool.reset()  # and are still there to answer
print(json.dumps(pool.worker_pids()), flush=True)
# no pool.close(): the interpreter's exit must still end the workers, and not wait on them forever
"""


def test_workers_outlive_a_group_sigterm_but_never_the_trainer(cli) -> None:
    """Workers ignore SIGTERM (item 8 of the security issue), so the exit of a trainer that never
    closed its pool must end them some other way than multiprocessing's SIGTERM-then-join."""
    script = "import signal; signal.signal(signal.SIGTERM, lambda *_: None)\n" + UNCLOSED_POOL  # the trainer handles it
    result = forked_run.run([sys.executable, "-c", script], cwd=REPO, env=cli.env(), text=True, timeout=120,
                            start_new_session=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(json.loads(result.stdout)) == 2
    assert cli.leftovers() == []
