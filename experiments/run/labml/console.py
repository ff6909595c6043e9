"""labml's console output, brought in line with the run's own: whole lines through `say`, no banner.

labml prints with its own `\\r` + 100 spaces, which leaves fragments of a longer line beside a
progress line, and it prints a banner with the whole git commit message, every paragraph of it,
on every run and resume (run.yaml still records the commit, its message and whether the tree was
dirty). labml has no setting for either; both are private parts of it, replaced here and checked
by the tests on every labml upgrade.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from labml.internal.experiment import Experiment
from labml.internal.logger import logger_singleton
from labml.internal.logger.destinations import Destination

# What labml's sender prints while it delivers a finished run's last packets. They would be the
# last lines of the run page's console (labml sends its console there), after the run's summary;
# a dashboard that does not take them in time gets the run's own warning instead.
SENDER_NOTICES = ("Still updating labml server", "Updating App. Please wait", "Finished updating LabML App")
# labml's words for a live change it applied; the run says it in its own (`LIVE_CHANGE`).
LABML_LIVE_CHANGE = "Dynamic hyper parameter"


class _Above(Destination):
    """labml's console output as whole lines through `say`, without its sender's notices."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def log(self, parts: list[Any], *, is_new_line: bool = True, is_reset: bool = True) -> None:
        text = "".join(part if isinstance(part, str) else part[0] for part in parts).strip("\n")
        # labml's blank separator lines and its bare carriage returns are dropped
        if text.strip() and not text.strip().startswith((*SENDER_NOTICES, LABML_LIVE_CHANGE)):
            self.say(text)


@contextmanager
def console_through(say: Callable[[str], None]) -> Iterator[None]:
    """While inside, labml's logger prints through `say`, and its run banner is left out. The
    destinations list is the logger's private attribute; the banner its `Experiment.__print_info`
    (name-mangled), left alone if a future labml renames it."""
    logger = logger_singleton()
    saved = logger._Logger__destinations
    logger._Logger__destinations = [_Above(say)]
    banner = Experiment.__dict__.get("_Experiment__print_info")
    if banner is not None:
        Experiment._Experiment__print_info = lambda self: None
    try:
        yield
    finally:
        logger._Logger__destinations = saved
        if banner is not None:  # labml as it was, for whatever else this process runs
            Experiment._Experiment__print_info = banner
