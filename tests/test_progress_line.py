"""The progress line and the end-of-run summary, as parts: times, the ETA, what a log file gets,
the grouping of the games by cores, and the labml internals the line relies on. Through the real
command line and a terminal: tests/test_console.py."""

from __future__ import annotations

import io
import os

import pytest
from labml.internal.experiment import Experiment
from labml.internal.logger import logger_singleton

from configs.launch import grouped_for_cores
from configs.ppo import PPOConfig
from experiments.run.console import Console
from experiments.run.progress import ProgressLine, hms, progress_text, rate
from experiments.run.report import summary_line


def test_the_summary_names_the_games_the_score_is_over() -> None:
    # The score is the mean of the last --score-window games (not always 100), or of all of them
    # while fewer have finished.
    summary = {"status": "completed", "updates": 97, "env_steps": 99_328, "wall_time_s": 3_725.0, "sps": 26.7,
               "score_mean_100": 10.25, "games": 1_873}
    assert summary_line(summary, 97, score_window=10) == (
        "completed: update 97 of 97 · 99,328 agent steps in 1:02:05 (27 steps/s, start-up included) · "
        "score 10.2 (mean of the last 10 of 1,873 games)")
    few = {**summary, "games": 3, "score_mean_100": 2.0}
    assert summary_line(few, 97, score_window=100).endswith("score 2.0 (mean of the last 3 of 3 games)")
    assert summary_line({**summary, "games": 0, "score_mean_100": None}, 97, 100).endswith("no game finished yet")


def test_times_are_hours_minutes_seconds_and_the_line_says_k_of_n() -> None:
    assert (hms(25), hms(60 * 35 + 20), hms(3723), hms(26 * 3600), hms(None)) == ("0:00:25", "0:35:20", "1:02:03", "26:00:00", "-:--:--")
    # 12 of 976 updates done in 25 s: 964 more at 25/12 s each is 2008 s = 0:33:28.
    assert progress_text(12, 976, 12_288, 1.84, 530.4, 25.0, 964 * 25 / 12) == (
        "update 12/976 (1.2%) · elapsed 0:00:25 · ETA 0:33:28 · score 1.8 · 12,288 agent steps · 530 steps/s")
    assert progress_text(1, 3, 128, None, None, 9.0, None).startswith("update 1/3 (33.3%) · elapsed 0:00:09 · ETA -:--:-- · score -")


def test_the_eta_leaves_out_the_first_update_whose_time_holds_the_start_up() -> None:
    # A resume at update 500 of 976, 128 agent steps an update. Its first update ends 50 s after
    # the loop started (most of it start-up); ten more end at 70 s, 2 s each: 976 − 511 = 465
    # left × 2 s = 930 s, at 1,280 steps / 20 s = 64 steps/s. Counted from the loop's start, the
    # same moment would have said 465 × 70 / 11 = 2,959 s.
    since = (50.0, 501, 501 * 128)
    assert rate(since, 70.0, 511, 511 * 128, 976) == (64.0, 930.0)
    assert hms(930.0) == "0:15:30"
    assert rate(since, 50.0, 501, 501 * 128, 976) == (None, None)  # nothing measured after it yet
    assert rate(since, 1000.0, 976, 976 * 128, 976)[1] == 0.0  # the last update: done
    log = io.StringIO()
    with ProgressLine(500, 500 * 128, 976, 0.0, Console(log), interactive=False) as progress:
        progress.show(501, 501 * 128, None)
    assert " · ETA -:--:-- · " in log.getvalue()  # the first update gives no ETA at all
    assert progress.since is not None and progress.since[1:] == (501, 501 * 128)


@pytest.mark.parametrize(("cores", "grouping"), [(1, (1, 8)), (2, (2, 4)), (3, (2, 4)), (4, (4, 2)), (7, (4, 2)), (8, (8, 1)), (64, (8, 1))])
def test_the_8_games_are_grouped_by_the_usable_cores(cores: int, grouping: tuple[int, int]) -> None:
    grouped = grouped_for_cores(PPOConfig(), cores)
    assert (grouped.n_workers, grouped.envs_per_worker) == grouping
    assert (grouped.n_envs, grouped.batch_size, grouped.n_updates) == (8, 1024, 9765)  # the same games, batch and schedule


def test_a_log_file_gets_the_progress_line_every_few_updates_and_after_a_quiet_minute() -> None:
    log = io.StringIO()
    progress = ProgressLine(0, 0, 100, 0.0, Console(log), every=10, every_s=3600.0, interactive=False)
    with progress:
        for update in range(1, 13):
            progress.show(update, 128 * update, None)
        progress.printed -= 3600.0  # an hour passes in update 13: the next update prints, not the 20th
        progress.show(13, 128 * 13, None)
        progress.show(14, 128 * 14, None)
    printed = [line.split(" ")[1] for line in log.getvalue().splitlines()]
    assert printed == ["1/100", "10/100", "13/100"]


def test_the_labml_internals_we_adjust_still_exist() -> None:
    # progress.py adjusts two private parts of labml (it has no setting for either); an upgrade
    # that renames them must fail here rather than silently bring the commit message back.
    assert hasattr(Experiment, "_Experiment__print_info")
    assert isinstance(logger_singleton()._Logger__destinations, list)


def test_labmls_banner_and_destinations_are_left_out_inside_and_put_back_after() -> None:
    """A run keeps labml's banner out while it runs; whatever else the process does after (a test
    session, a tool) finds labml as it was (issue 70: the banner was replaced for good)."""
    from experiments.run.labml.console import console_through

    banner, destinations = Experiment.__dict__["_Experiment__print_info"], logger_singleton()._Logger__destinations
    with console_through(lambda line: None):
        assert Experiment.__dict__["_Experiment__print_info"] is not banner
        with console_through(lambda line: None):  # entered again inside (a run's start inside its console)
            pass
        assert Experiment.__dict__["_Experiment__print_info"] is not banner
    assert Experiment.__dict__["_Experiment__print_info"] is banner
    assert logger_singleton()._Logger__destinations is destinations


def test_a_terminal_of_0_columns_gets_the_whole_line() -> None:
    """A terminal that reports 0 columns made tqdm's width −1, and the line lost its end (issue 71)."""
    import fcntl
    import select
    import struct
    import termios

    from experiments.run.progress import _Line

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 0, 0, 0))  # rows 24, columns 0
    with os.fdopen(slave, "w") as terminal, os.fdopen(master, "rb", buffering=0) as screen:
        line = _Line(total=3, file=terminal, bar_format="{text}", dynamic_ncols=True, mininterval=0)
        line.text = "update 1/3 · score 1.5"
        line.refresh()
        terminal.flush()
        shown = b""
        while not shown.endswith(b"score 1.5"):  # the terminal passes the write on as it can: read until it is all there
            assert select.select([master], [], [], 60)[0], f"the terminal showed only {shown!r}"
            shown += screen.read(4096) or b""
        line.close()
    assert shown.decode().split("\r")[-1] == "update 1/3 · score 1.5"


@pytest.mark.parametrize(("options", "games"), [
    ({"backend": "ray", "ray_address": "127.0.0.1:6379", "n_workers": 2, "envs_per_worker": 4},
     "8 games in 2 Ray actors of 4 (the Ray cluster at 127.0.0.1:6379)"),
    ({"backend": "ray", "n_workers": 2, "envs_per_worker": 1}, "2 games in 2 Ray actors (a private Ray on this machine)"),
    ({"backend": "serial", "n_workers": 1, "envs_per_worker": 2}, "2 games in the trainer's own process"),
])
def test_the_start_line_says_what_the_workers_are(options: dict, games: str) -> None:
    """Ray actors run on a cluster's nodes: this machine's usable cores said nothing of them (issue 71)."""
    from pathlib import Path

    from configs.ppo import PPOConfig
    from experiments.run.report import start_lines

    config = PPOConfig(**options, worker_steps=8, updates=3)
    line = start_lines(config, "0" * 32, Path("runs/breakout/" + "0" * 32), "fp32").splitlines()[1]
    assert line == f"{games} · 3 updates of {config.batch_size:,} agent steps · network in fp32"
