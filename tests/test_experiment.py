"""The experiment end to end through its real command line."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from configs.ppo import PPOConfig
from ppo.checkpoint import load_checkpoint
from ppo.devices import machine_fingerprint
from tests.conftest import Cli, refused_in_process, run_once, train_from_seed

TINY = ["--n-workers", "2", "--worker-steps", "16", "--minibatches", "2", "--epochs", "2"]
SUMMARY_KEYS = {"run_uuid", "updates", "env_steps", "score_mean_100", "games", "sps", "checkpoint"}


def summary_of(stdout: str) -> dict:
    path = Path(stdout.strip().splitlines()[-1])
    assert path.name == "summary.json" and path.is_file(), stdout[-2000:]
    return json.loads(path.read_text())


# The smoke run, filming a game at its last update: the smoke test and the filming test check one
# run, made once a session and copied for each (conftest.run_once).
SMOKE = ["--updates", "2", "--n-workers", "2", "--worker-steps", "16", "--eval-video-every", "2"]


def test_what_a_test_started_and_never_stopped_is_killed_when_it_ends() -> None:
    # The `cli` fixture's teardown (conftest): a real process started through Cli and left running,
    # as a test that fails midway leaves it, is killed, and nothing with its marker is left.
    session = Cli()
    server = session.start("http.server", "0", "--bind", "127.0.0.1")
    try:
        assert session.kill_leftovers() == [server.pid]
        assert server.wait(timeout=60) == -signal.SIGKILL
        assert session.leftovers() == []
    finally:
        server.kill()
        server.communicate()


def test_smoke_two_updates_through_the_cli(cli, tmp_path: Path) -> None:
    summary = run_once(cli, tmp_path, *SMOKE)  # asserts the exit status 0
    assert set(summary) >= SUMMARY_KEYS
    assert summary["updates"] == 2 and summary["env_steps"] == 2 * 2 * 16
    assert summary["status"] == "completed" and summary["sps"] > 0
    assert summary["score_mean_100"] is None or summary["score_mean_100"] >= 0
    checkpoint = load_checkpoint(Path(summary["checkpoint"]))
    assert checkpoint["update"] == 2 and checkpoint["config"]["n_workers"] == 2
    run_dir = Path(summary["run_dir"])
    assert run_dir == tmp_path / "breakout" / summary["run_uuid"] and (run_dir / "configs.yaml").is_file()
    # labml's own record of the run ends with the same status (the dashboard shows it).
    assert json.loads((run_dir / "run_log.jsonl").read_text().splitlines()[-1])["status"] == "completed"
    assert cli.leftovers() == []


def test_training_films_a_game_every_k_updates(cli, tmp_path: Path) -> None:
    run_dir = Path(run_once(cli, tmp_path, *SMOKE)["run_dir"])
    assert [p.name for p in (run_dir / "videos").iterdir()] == ["update_000002.mp4"]
    assert (run_dir / "videos" / "update_000002.mp4").stat().st_size > 10_000


def test_sigterm_checkpoints_and_the_run_ends_interrupted(cli, tmp_path: Path) -> None:
    # Its resume is the one a Ctrl-C's is (tests/test_console.py runs it as printed) and a SIGTERM
    # mid-update's (tests/test_run_safety_signals.py, bit for bit): not launched a third time here.
    args = ["--updates", "3", *TINY, "--checkpoint-every", "1", "--data-dir", str(tmp_path)]
    process = cli.start_held(tmp_path / "held", *args)  # mid-training, after update 1's checkpoint
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "SIGTERM received" in stderr
    interrupted = summary_of(stdout)
    assert interrupted["status"] == "interrupted" and interrupted["updates"] == 1  # update 2 abandoned
    assert interrupted["env_steps"] == 2 * 16 and load_checkpoint(Path(interrupted["checkpoint"]))["update"] == 1
    assert cli.leftovers() == []


def test_a_killed_run_still_says_where_it_ran_and_where_it_stopped(cli, tmp_path: Path) -> None:
    # A run that never reaches its end (kill -9, a machine taken back) writes no final summary; the
    # one it wrote at its start and at each checkpoint must still name its machine and checkpoint.
    process = cli.start("experiments.breakout", "--updates", "1000", *TINY, "--checkpoint-every", "2", "--device", "cpu",
                        "--data-dir", str(tmp_path))
    deadline = time.monotonic() + 600
    while True:  # until the summary written after the checkpoint of update 2 is there
        found = list(tmp_path.glob("breakout/*/summary.json"))
        if found and json.loads(found[0].read_text())["updates"] >= 2:
            break
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no summary after a checkpoint"
        time.sleep(0.02)
    process.kill()  # SIGKILL: nothing of the run's own ending runs
    process.communicate(timeout=60)
    assert cli.leftovers() == []  # its workers see the trainer gone and end
    summary = json.loads(found[0].read_text())
    assert summary["status"] == "running" and summary["machines"] == [machine_fingerprint(torch.device("cpu"))]
    # Written just after a checkpoint (every 2 updates), so it names that checkpoint's update and
    # steps; a kill between a checkpoint and its summary leaves the checkpoint one period ahead.
    assert summary["updates"] % 2 == 0 and summary["env_steps"] == summary["updates"] * 2 * 16
    checkpoint = load_checkpoint(Path(summary["checkpoint"]))
    assert checkpoint["update"] in (summary["updates"], summary["updates"] + 2)
    assert checkpoint["machines"] == summary["machines"]


@pytest.mark.slow
def test_same_seed_gives_the_same_first_rollout() -> None:
    def first_rollout(seed: int) -> dict[str, np.ndarray]:
        return train_from_seed(PPOConfig(n_workers=2, envs_per_worker=2, worker_steps=32, seed=seed))[0]

    a, b, c = first_rollout(3), first_rollout(3), first_rollout(4)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert not np.array_equal(a["actions"], c["actions"])
    assert not np.array_equal(a["observations"], c["observations"])


@pytest.mark.parametrize(("args", "expected"), [
    (["--n-workers", "0"], "--n-workers 0: expected an integer from 1 to 4_096"),
    (["--n-workers", "two"], "--n-workers two: expected an integer"),
    (["--minibatches", "3"], "--minibatches 3: expected a divisor of the batch size 1024"),
    (["--learning-rate", "-1e-4"], "--learning-rate -0.0001: expected a number ≥ 0"),
    (["--learning_rate", "nan"], "--learning-rate nan: expected a finite number"),
    (["--gamma", "1.5"], "--gamma 1.5: expected a number in [0, 1]"),
    (["--game", "NoSuchGame"], "--game NoSuchGame: expected an ALE game"),
    (["--game", ""], "--game '': expected a non-empty string"),
    (["--epochs", "100"], "--epochs 100: expected a value in [1, 32]"),
    (["--updates", "2", "--total-env-steps", "5000"], "either --updates or --total-env-steps"),
    (["--device", "tpu"], "--device tpu: expected auto, cpu, cuda or cuda:N"),
    (["--clip-rewards", "maybe"], "--clip-rewards maybe: expected true or false"),
    (["--no-such-option", "1"], "unrecognized arguments: --no-such-option"),
    (["--resume", "0123456789abcdef0123456789abcdef"], "--resume 0123456789abcdef0123456789abcdef: expected the uuid of a run"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str, tmp_path: Path, capsys) -> None:
    err = refused_in_process(capsys, [*args, "--data-dir", str(tmp_path)])
    assert err.startswith("error: ") and expected in err, err
    assert list(tmp_path.iterdir()) == []  # and nothing written


def test_bad_input_through_the_real_cli(cli) -> None:
    result = cli.run("experiments.breakout", "--worker-steps", "-5")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --worker-steps -5: expected an integer from 1 to 100_000"
    assert result.stdout == ""
    assert cli.leftovers() == []


def test_help_lists_every_option_with_its_default(cli) -> None:
    result = cli.run("experiments.breakout", "--help")
    assert result.returncode == 0
    for option, default in (("--n-workers", "8"), ("--worker-steps", "128"), ("--learning-rate", "0.00025"),
                            ("--clip-range", "0.1"), ("--total-env-steps", "10000000"), ("--resume", None)):
        assert option in result.stdout
        if default:
            assert f"(default: {default})" in " ".join(result.stdout.split())
