"""Ray's own messages to a driver on a cluster (ray_setup/driver_log.py), in a real process with a
real file descriptor 2: Ray's Python records and its C++ client's lines go to the file, said once on
stderr; the driver's own lines still reach stderr; the `ray` logger and fd 2 are put back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

DRIVER = """
import logging, os, sys
from pathlib import Path
from ray_setup.driver_log import DriverRayLog
logger = logging.getLogger("ray")
logger.addHandler(logging.StreamHandler())  # as `import ray` gives it: to stderr
before = list(logger.handlers)
log = DriverRayLog()
log.hold()
logging.getLogger("ray.runtime_env").warning("advice before the session's folder is known")
log.start(Path(sys.argv[1]))
logging.getLogger("ray.worker").warning("a warning of Ray's")
os.write(2, b"[2026-12-07 02:00:00,123 W 41 42] core_worker.cc:1: a task's node was lost\\n")
print("ray: node node-2 was lost (our own line)", file=sys.stderr, flush=True)
log.stop()
assert logger.handlers == before and logger.propagate
logging.getLogger("ray.worker").warning("after the connection: Ray's own handler again")
"""


def test_rays_messages_go_to_the_drivers_log_said_once_and_the_drivers_own_lines_to_stderr(tmp_path: Path) -> None:
    path = tmp_path / "driver.log"
    result = subprocess.run([sys.executable, "-c", DRIVER, str(path)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"ray: Ray's own messages to this driver are kept in {path}",
                                          "ray: node node-2 was lost (our own line)",
                                          "after the connection: Ray's own handler again"]
    kept = path.read_text().splitlines()
    assert [line.split(" -- ")[-1] for line in kept[:2]] == ["advice before the session's folder is known", "a warning of Ray's"]
    assert kept[2] == "[2026-12-07 02:00:00,123 W 41 42] core_worker.cc:1: a task's node was lost"
    assert len(kept) == 3
