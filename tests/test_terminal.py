"""`configs.terminal.escaped`, the one function every command passes text from outside through
before it reaches a terminal, and the two places every one-line error and every message of a
training run go through it (`configs.refusals.fail`, `experiments.run.console.say`)."""

from __future__ import annotations

import pytest

from configs.refusals import fail
from configs.terminal import escaped
from experiments.run import console


@pytest.mark.parametrize(("text", "shown"), [
    ("learning_rate=1e-4 → ok, é", "learning_rate=1e-4 → ok, é"),  # printable text, accents and symbols: as they are
    ("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07"),  # clear screen, retitle the window
    ("a\rb\bc\td\ne", "a\\rb\\x08c\\td\\ne"),  # a carriage return or backspace hides what came before
    ("\x9b31m\x7f", "\\x9b31m\\x7f"),  # C1's one-byte CSI, DEL
    ("\u202eevil\u2028", "\\u202eevil\\u2028"),  # a bidirectional override, a line separator
    ("\\x1b", "\\x1b"),  # already escaped: unchanged
])
def test_every_control_character_is_written_as_its_escape(text: str, shown: str) -> None:
    assert escaped(text) == shown
    assert escaped(shown) == shown  # escaping twice changes nothing more


def test_lines_keeps_our_own_line_ends_only() -> None:
    assert escaped("first\x1b[A\nsecond\r", lines=True) == "first\\x1b[A\nsecond\\r"


def test_a_one_line_error_quoting_a_file_stays_one_line_without_controls(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        fail("--resume x: runs/\x1b[2Jevil\nname is a symbolic link")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: --resume x: runs/\\x1b[2Jevil\\nname is a symbolic link\n"


def test_a_training_runs_message_quoting_a_dashboard_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    console.say("warning: the dashboard did not take the run's history: \x1b]0;owned\x07\nit shows the updates from now on")
    assert capsys.readouterr().err == ("warning: the dashboard did not take the run's history: \\x1b]0;owned\\x07\n"
                                       "it shows the updates from now on\n")
