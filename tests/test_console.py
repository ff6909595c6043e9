"""What a person sees in the terminal: the grouping line, the progress line, messages on lines of
their own (on a real pseudo-terminal too), the end-of-run summary and next commands, and what
Ctrl-C prints — through the real command line, and each printed command run as printed."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import termios
from fcntl import ioctl
from pathlib import Path

import pytest
from labml.internal.logger import logger_singleton

from configs.cli import parse_config
from configs.ppo import PPOConfig
from experiments.run.console import Console
from experiments.run.labml.console import console_through
from experiments.run.progress import ProgressLine
from experiments.run.report import NOT_CARRIED, changed_options, next_commands
from ppo.checkpoint import load_checkpoint
from tests import forked_run
from tests.conftest import REPO, wait_for_file

TINY = ["--n-workers", "2", "--worker-steps", "16", "--minibatches", "2", "--epochs", "1"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def screen(raw: str) -> list[str]:
    """The lines a terminal shows for `raw`: a carriage return goes back to the line's start and
    what follows overwrites it, so a message written into a progress line shows as one mixed line."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for char in ANSI.sub("", raw):
        if char == "\r":
            column = 0
        elif char == "\n":
            lines.append("".join(line).rstrip())
            line, column = [], 0
        else:
            if column < len(line):
                line[column] = char
            else:
                line.append(char)
            column += 1
    if line:
        lines.append("".join(line).rstrip())
    return lines


def command_args(printed: str, program: str) -> list[str]:
    """The arguments after `python -m <program>` of a printed command line."""
    words = shlex.split(printed.strip())
    assert words[:3] == ["python", "-m", program], printed
    return words[3:]


def summary_of(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("summary.json"), stdout  # stdout is the path alone
    return json.loads(Path(lines[0]).read_text())


# ---- the parts, in-process -------------------------------------------------------------------

def test_a_message_while_the_line_is_shown_gets_a_line_of_its_own() -> None:
    terminal = io.StringIO()
    console = Console(terminal)
    with console_through(console.say), ProgressLine(0, 0, 3, 0.0, console, interactive=True) as progress:
        progress.show(1, 128, None)
        console.say("SIGINT received: stopping within seconds")  # ours, as the signal handler says it
        logger_singleton().log(["Using the dashboard at ", ("http://127.0.0.1:1", None)])  # labml's
        # labml's words for a live change are left out: the run says it in its own (experiments/run/labml/live.py)
        logger_singleton().log(["Dynamic hyper parameter changed: ", ("learning_rate", None), ": 0.00025 -> 0.0001"])
        progress.show(2, 256, 1.5)
    shown = screen(terminal.getvalue())
    assert "SIGINT received: stopping within seconds" in shown
    assert "Using the dashboard at http://127.0.0.1:1" in shown
    assert not any("Dynamic hyper parameter" in line for line in shown)
    assert shown[-1].startswith("update 2/3 (66.7%) · elapsed ") and "score 1.5 · 256 agent steps" in shown[-1]
    assert console.above is None  # messages after the run print plainly again


# ---- the real command line ---------------------------------------------------------------------

def test_a_short_run_shows_its_progress_then_a_summary_and_commands_that_work(cli, tmp_path: Path) -> None:
    # Started from a folder of the user's, as the docs show it: every path printed is relative to
    # it, stdout's too, and the printed evaluate command films into the run's folder from there.
    result = cli.run("experiments.breakout", "--updates", "3", *TINY, "--data-dir", "runs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (printed,) = result.stdout.splitlines()
    summary = summary_of(str(tmp_path / printed))
    run_dir = f"runs/breakout/{summary['run_uuid']}"
    assert printed == f"{run_dir}/summary.json" and summary["run_dir"] == str(tmp_path / run_dir)
    lines = result.stderr.splitlines()
    assert "\r" not in result.stderr  # not a terminal: whole lines only
    assert lines[0] == f"breakout run {summary['run_uuid']} in {run_dir}"
    cores = len(os.sched_getaffinity(0))
    assert lines[1] == (f"2 games in 2 worker processes ({cores} usable core{'s' if cores > 1 else ''}) · 3 updates of 32 agent steps"
                        " · network in fp32 (auto)")
    assert summary["precision"] == "fp32"
    progress = [line for line in lines if line.startswith("update ")]
    assert [line.split(" · ")[0] for line in progress] == ["update 1/3 (33.3%)", "update 3/3 (100.0%)"]
    assert " · ETA -:--:-- · " in progress[0]  # the first update's time holds the start-up: no rate from it
    assert re.fullmatch(r"update 3/3 \(100\.0%\) · elapsed \d+:\d\d:\d\d · ETA 0:00:00 · score \S+ · 96 agent steps · [\d,]+ steps/s", progress[-1])
    assert "Dynamic" not in result.stderr and "¶" not in result.stderr  # labml's banner with the commit message is gone
    assert any(line.startswith("completed: update 3 of 3 · 96 agent steps in ") for line in lines)
    evaluate = lines[lines.index("  watch it play, 10 whole games, the first filmed:") + 1]
    assert evaluate == f"    python -m experiments.evaluate --run {summary['run_uuid']} --games 10 --video evaluate.mp4"
    played = cli.run("experiments.evaluate", *command_args(evaluate, "experiments.evaluate"), cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-2000:]
    result_json = json.loads(played.stdout.strip().splitlines()[-1])
    assert result_json["games"] == 10 and result_json["video"] == f"{run_dir}/evaluate.mp4"
    assert f"video of game 1: {run_dir}/evaluate.mp4" in played.stderr.splitlines()
    # A bare name lands in the run's folder, where the dashboard looks (dashboard/videos.py), not here.
    assert (tmp_path / run_dir / "evaluate.mp4").stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    assert "    python -m experiments.dashboard" in lines
    assert cli.leftovers() == []


def test_ctrl_c_prints_the_resume_command_and_it_resumes(cli, tmp_path: Path) -> None:
    data_dir = tmp_path / "my runs"  # not the default, and with a space: the command must quote it
    process = cli.start_held(tmp_path / "held", "--updates", "3", *TINY, "--data-dir", str(data_dir))
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + signal.SIGINT, stderr[-3000:]
    summary = summary_of(stdout)
    lines = stderr.splitlines()
    assert f"stopped by SIGINT after update 1; its checkpoint: {summary['checkpoint']}" in lines
    resume = lines[lines.index("  continue it from update 1:") + 1]
    assert resume == f"    python -m experiments.breakout --resume {summary['run_uuid']} --data-dir '{data_dir}'"

    resumed = cli.run("experiments.breakout", *command_args(resume, "experiments.breakout"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed at update 1 of 3" in resumed.stderr.splitlines()
    assert [line.split(" · ")[0] for line in resumed.stderr.splitlines() if line.startswith("update ")] == [
        "update 2/3 (66.7%)", "update 3/3 (100.0%)"]
    ended = summary_of(resumed.stdout)
    assert (ended["run_uuid"], ended["updates"], ended["env_steps"]) == (summary["run_uuid"], 3, 3 * 32)
    assert ended["status"] == "completed" and ended["games"] >= summary["games"]
    assert cli.leftovers() == []


# A run held once it checkpointed update 1 and is about to checkpoint update 2 (--checkpoint-every 1),
# busy until a second signal interrupts it (as conftest's HELD_RUN, one update later).
HELD_AFTER_A_CHECKPOINT = """
import os, sys, time
from pathlib import Path
from ppo.trainer import Trainer
original, hold = Trainer.state_dict, Path(os.environ["HOLD_FILE"])
def state_dict_then_hold(self, live_values):
    if self.update == 2:
        hold.touch()
        while not self.should_stop():
            time.sleep(0.01)
        hold.with_suffix(".stop").touch()  # the first signal was seen
        while True:
            time.sleep(0.01)
    return original(self, live_values)
Trainer.state_dict = state_dict_then_hold
from experiments.breakout import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_second_ctrl_c_names_the_checkpoint_it_will_resume_from(cli, tmp_path: Path) -> None:
    process = forked_run.popen([sys.executable, "-c", HELD_AFTER_A_CHECKPOINT, "--updates", "5", *TINY,
                                "--checkpoint-every", "1", "--data-dir", str(tmp_path)],
                               cwd=REPO, env=dict(cli.env(), HOLD_FILE=str(tmp_path / "held")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_file(tmp_path / "held", process)
        process.send_signal(signal.SIGINT)
        wait_for_file(tmp_path / "held.stop", process)  # two signals at once would be taken as one
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=600)
    finally:
        process.kill()
    assert process.returncode == 130, stderr[-3000:]
    lines = stderr.splitlines()
    said = next(line for line in lines if line.startswith("stopped at once; it will resume from "))
    checkpoint = Path(said.removeprefix("stopped at once; it will resume from ").split(" (update ")[0])
    assert said.endswith(" (update 1):") and checkpoint.name == "checkpoint.pt"
    assert load_checkpoint(checkpoint)["update"] == 1
    assert lines[lines.index(said) + 1].startswith(f"  python -m experiments.breakout --resume {checkpoint.parents[1].name} --data-dir ")
    assert cli.leftovers() == []


# The run as on a terminal; after update 1 is shown, learning_rate is changed the way labml's
# dashboard handler changes it (ExperimentDynamicUpdateHandler.handle → DynamicHyperParam.set_value).
LIVE_CHANGE = """
import sys
from labml.internal.experiment import experiment_singleton
from ppo.trainer import Trainer
original = Trainer.state_dict
def state_dict_then_change(self, live_values):
    if self.update == 1 and not getattr(self, "changed", False):
        self.changed = True
        experiment_singleton().configs_processor.get_value("learning_rate").set_value(0.0001)
    return original(self, live_values)
Trainer.state_dict = state_dict_then_change
from experiments.breakout import main
sys.exit(main(sys.argv[1:]))
"""


def test_on_a_terminal_a_live_change_is_a_line_of_its_own(cli, tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))  # a 200-column terminal
    process = forked_run.popen([sys.executable, "-c", LIVE_CHANGE, "--updates", "3", *TINY, "--data-dir", str(tmp_path)],
                               cwd=REPO, env=cli.env(), stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    raw = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the run closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    os.close(leader)
    assert process.wait(timeout=600) == 0, raw.decode(errors="replace")[-3000:]
    shown = screen(raw.decode())
    assert "live value learning_rate: 0.00025 → 0.0001, from the next update" in shown, shown
    assert any(line.startswith("update 3/3 (100.0%) · ") for line in shown), shown
    assert not [line for line in shown if "update " in line and "live value" in line], shown  # no fragments
    assert not [line for line in shown if "Dynamic hyper parameter" in line], shown  # labml's words are not repeated
    assert "\r" in raw.decode()  # the line was redrawn in place, as on a terminal
    assert cli.leftovers() == []


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs util-linux's taskset")
def test_on_one_core_the_8_games_run_in_one_process(cli, tmp_path: Path) -> None:
    result = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "experiments.breakout", "--updates", "1",
                             "--worker-steps", "16", "--minibatches", "2", "--epochs", "1", "--data-dir", str(tmp_path)],
                            cwd=REPO, env=cli.env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert any(line.startswith("8 games in 1 worker process of 8 (1 usable core) · 1 update of 128 agent steps · network in ")
               for line in result.stderr.splitlines()), result.stderr
    summary = summary_of(result.stdout)
    config = load_checkpoint(Path(summary["checkpoint"]))["config"]
    assert (config["n_workers"], config["envs_per_worker"], summary["env_steps"]) == (1, 8, 8 * 16)
    assert cli.leftovers() == []


@pytest.mark.parametrize(("updates", "stop_after", "expected"), [
    (3, None, "  continue it from update 3:"),
    (5, 5 * 32, "  continue it to the end of its schedule (update 10):"),
    (10, None, "  train longer: its schedule is done (the learning rate has decayed to 0); start a longer run:"),
])
def test_the_next_commands_fit_where_the_run_stopped(updates: int, stop_after: int | None, expected: str) -> None:
    config = PPOConfig(n_workers=2, worker_steps=16, updates=10, stop_after_env_steps=stop_after, data_dir="/data/my runs")
    summary = {"run_uuid": "ab" * 16, "run_dir": "/data/my runs/breakout/" + "ab" * 16, "checkpoint": "c.pt", "updates": updates, "env_steps": updates * 32}
    lines = next_commands(summary, config, "http://127.0.0.1:5005/api/v1/default")
    after = lines[lines.index(expected) + 1]
    if updates < 10:
        suffix = " --stop-after-env-steps none" if stop_after else ""
        assert after == f"    python -m experiments.breakout --resume {'ab' * 16} --data-dir '/data/my runs' --dashboard http://127.0.0.1:5005/api/v1/default{suffix}"
    assert lines[-2:] == ["  its charts in the dashboard:", f"    http://127.0.0.1:5005/run/{'ab' * 16}"]
    if updates == 10:  # a new, longer run keeps what this one set (worker steps; the grouping is chosen again)
        assert after == "    python -m experiments.breakout --total-env-steps 10000000 --worker-steps 16 --data-dir '/data/my runs'"
    # a bare name: evaluate writes it into the run's folder, wherever the data dir is
    assert lines[2] == f"    python -m experiments.evaluate --run {'ab' * 16} --data-dir '/data/my runs' --games 10 --video evaluate.mp4"


def test_a_longer_run_is_started_with_the_settings_of_the_one_that_ended() -> None:
    """The printed command, parsed back by the real parser, gives the same config but the schedule."""
    config = PPOConfig(game="Pong", learning_rate=1e-3, anneal_clip_range=False, value_clip_range=0.1,
                       name="my-run", worker_steps=16, updates=10, n_workers=2)
    command = changed_options(config)
    assert sorted(shlex.split(command)) == sorted(shlex.split(
        "--game Pong --worker-steps 16 --learning-rate 0.001 --anneal-clip-range false --value-clip-range 0.1 --name my-run"))
    parsed, _, _ = parse_config([*shlex.split(command), "--total-env-steps", "10000000"], "test", "test")
    for name, value in config.to_dict().items():
        if name not in NOT_CARRIED:
            assert getattr(parsed, name) == value, name
