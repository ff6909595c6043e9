"""The order in which the xdist workers get the suite's files: longest first.

xdist's own `--dist=loadfile` hands out files by their number of tests, so a long file of few tests
(a real cluster, a population, the chaos harness, a browser) starts last and one worker runs it alone
while the other idles. Here each file (scope) is one unit as before, except that every file using
the `local_cluster` fixture is ONE unit, so they share one cluster on one worker; the units go
longest first (longest-processing-time scheduling) by the seconds measured per file in
tests/file_seconds.json. A file missing from that table goes first: it is new, and a new long file
placed last costs a whole idle worker, while a short one placed first costs only its own seconds.

The table is regenerated from a whole run's durations (`python -m tests.scheduling --help`):

    python -m pytest --durations=0 | tee /tmp/suite.log
    python -m tests.scheduling /tmp/suite.log > tests/file_seconds.json
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

TABLE = Path(__file__).with_name("file_seconds.json")
CLUSTER_SCOPE = "local_cluster"
# A `--durations` line: seconds, phase, node id (`12.34s call     tests/test_x.py::test_y[a]`).
# A test file takes the shared cluster as a test's parameter or through `usefixtures`.
USES_CLUSTER = re.compile(r"\blocal_cluster\s*[:,)=]|usefixtures\([^)]*[\"']local_cluster[\"']")
DURATION = re.compile(r"^\s*([0-9.]+)s\s+(?:setup|call|teardown)\s+(\S+?\.py)(?:::|\s|$)")


def seconds_per_file(log_lines: list[str]) -> dict[str, float]:
    """Sum the setup, call and teardown seconds of each file's tests in a `--durations=0` report."""
    totals: dict[str, float] = {}
    for line in log_lines:
        match = DURATION.match(line)
        if match:
            totals[match[2]] = totals.get(match[2], 0.0) + float(match[1])
    return {path: round(seconds, 1) for path, seconds in sorted(totals.items())}


class LongestFirstScheduling(LoadFileScheduling):
    """xdist's loadfile scheduling, with the cluster files as one unit and the units longest first."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        self.rootpath = Path(config.rootpath)
        self.seconds: dict[str, float] = json.loads(TABLE.read_text()) if TABLE.exists() else {}
        self.uses_cluster: dict[str, bool] = {}
        self.ordered = False

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if path not in self.uses_cluster:
            source = self.rootpath / path
            self.uses_cluster[path] = source.is_file() and bool(USES_CLUSTER.search(source.read_text(errors="replace")))
        return CLUSTER_SCOPE if self.uses_cluster[path] else path

    def _scope_seconds(self, scope: str) -> float:
        """Measured seconds of a unit; infinite (so first) if any of its files was never measured."""
        paths = [path for path, cluster in self.uses_cluster.items() if cluster] if scope == CLUSTER_SCOPE else [scope]
        return sum(self.seconds.get(path, float("inf")) for path in paths)

    def _assign_work_unit(self, node) -> None:
        # `schedule` fills the queue (by number of tests) and then assigns at once: reorder on the
        # first assignment, before any unit has left the queue.
        if not self.ordered:
            self.ordered = True
            units = sorted(self.workqueue.items(), key=lambda unit: -self._scope_seconds(unit[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m tests.scheduling SUITE_LOG  (the output of `python -m pytest --durations=0`)\n"
              "prints the seconds per test file as JSON, for tests/file_seconds.json")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    print(json.dumps(seconds_per_file(Path(argv[0]).read_text().splitlines()), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
