"""Ray's exceptions as one line (ray_setup/errors.py), on text shaped as Ray writes it: coloured,
a header first, a task's cause last."""

from __future__ import annotations

from ray_setup.errors import cause_line, first_line, plain

# As Ray prints a task that raised: its header, the task's traceback, and last the cause's message.
TASK_FAILED = ("\x1b[36mray::run_trial()\x1b[39m (pid=4242, ip=127.0.0.1)\n"
               '  File "experiments/ray_tasks.py", line 51, in run_trial\n'
               "    plan = plan_launch(overrides, run_uuid=run_uuid, label=label)\n\n"
               "ValueError: --data-dir /shared/runs: no such folder on this node  \n")


def test_a_task_s_cause_is_its_last_line_and_its_header_the_first_without_colours() -> None:
    error = RuntimeError(TASK_FAILED)
    assert cause_line(error) == "ValueError: --data-dir /shared/runs: no such folder on this node"
    assert first_line(error) == "ray::run_trial() (pid=4242, ip=127.0.0.1)"
    assert plain("\x1b[31mred\x1b[0m and \x1b[1;33mbold\x1b[0m") == "red and bold"


def test_an_error_with_no_text_is_named_by_its_type() -> None:
    # `str(e).splitlines()[0]` raised IndexError here, and a refusal became a traceback.
    assert (first_line(ConnectionError("")), cause_line(ConnectionError(" \n"))) == ("ConnectionError", "ConnectionError")
