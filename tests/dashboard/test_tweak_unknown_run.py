"""`tweak` on a run the dashboard it asks does not know: one line naming that dashboard, with
`--dashboard URL` to ask another, and what the run's folder here says of where the run reported.
Real runs of the trainer, a real dashboard (two, for a run sent to one and looked for on the other).
With no dashboard listening at all, `tweak` refuses its --dashboard, exit code 2, as every refusal."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dashboard_support import REPO, Dashboard, child_env, run_tool
from test_run_truth import FIRST_LEG

from experiments.tweak import main as tweak_main
from tests.conftest import Cli, refused_in_process, run_once

# A dashboard of this module's own (tests/dashboard/conftest.py): a copy of test_run_truth.py's run (the
# same uuid) must be unknown to it.
FRESH_DASHBOARD = True

# Where a run reported is all that matters here: its 2 games step in the trainer's own process.
TINY = ["--updates", "1", "--backend", "serial", "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "16",
        "--minibatches", "2", "--epochs", "1"]


def train(data_dir: Path, *args: str) -> str:
    """A finished one-update run under `data_dir`; its uuid."""
    result = subprocess.run([sys.executable, "-m", "experiments.breakout", *TINY, "--data-dir", str(data_dir), *args],
                            cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return str(json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())["run_uuid"])


def unknown(run_uuid: str, url: str) -> str:
    return f"error: RUN_UUID {run_uuid}: expected a run the dashboard at {url} knows; it has none of that uuid"


def test_a_run_found_nowhere_names_the_dashboard_asked(dashboard: Dashboard, tmp_path: Path) -> None:
    run_uuid = "0123456789abcdef" * 2
    result = run_tool("experiments.tweak", run_uuid, "learning_rate=1e-4", "--dashboard", dashboard.url, "--data-dir", str(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == unknown(run_uuid, dashboard.url) + " (a run that reports to another dashboard: add --dashboard URL)\n"


def test_a_run_never_sent_to_a_dashboard_is_said_to_be_one(dashboard: Dashboard, tmp_path: Path) -> None:
    # Any run trained without a dashboard: a copy of test_run_truth.py's first leg (made once a session).
    run_uuid = run_once(Cli(), tmp_path / "runs", *FIRST_LEG)["run_uuid"]
    listing = run_tool("experiments.tweak", run_uuid, "--dashboard", dashboard.url, "--data-dir", str(tmp_path / "runs"))
    assert listing.returncode == 2 and listing.stdout == ""
    assert listing.stderr == (unknown(run_uuid, dashboard.url) + f". Its folder {tmp_path / 'runs' / 'breakout' / run_uuid} is here, "
                              f"but the run reported to no dashboard: only a run started (or resumed) with --dashboard "
                              f"{dashboard.url} can be tweaked there\n")


def test_a_run_sent_to_another_dashboard_is_pointed_there(dashboard: Dashboard, tmp_path: Path, no_leftover_processes: None) -> None:
    run_uuid = train(tmp_path / "runs", "--dashboard", dashboard.url)
    other = Dashboard(tmp_path / "other-dashboard")
    try:
        other.wait_ready()
        asked = run_tool("experiments.tweak", run_uuid, "--dashboard", other.url, "--data-dir", str(tmp_path / "runs"))
    finally:
        other.kill()
    assert asked.returncode == 2 and asked.stdout == ""
    assert asked.stderr == (unknown(run_uuid, other.url) + f". Its folder {tmp_path / 'runs' / 'breakout' / run_uuid} says it "
                            f"reported to {dashboard.url}: add --dashboard {dashboard.url}\n")
    # The advice holds: that dashboard knows the run (it lists its values, and says a finished run takes no change).
    followed = run_tool("experiments.tweak", run_uuid, "--dashboard", dashboard.url)
    assert followed.returncode == 0 and "learning_rate = " in followed.stdout, followed.stderr
    # The 8-character id the dashboard shows names the same run, found under --data-dir.
    by_id = run_tool("experiments.tweak", run_uuid[:8], "--dashboard", dashboard.url, "--data-dir", str(tmp_path / "runs"))
    assert (by_id.returncode, by_id.stdout) == (0, followed.stdout), by_id.stderr


@pytest.mark.parametrize("changes", [[], ["learning_rate=1e-4"]])
def test_no_dashboard_listening_is_a_refusal_of_dashboard(changes: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # A port held bound but not listening: a connection there is refused, as where no dashboard runs.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        line = refused_in_process(capsys, ["0123456789abcdef" * 2, *changes, "--dashboard", url], tweak_main)
    assert line.startswith(f"error: --dashboard {url}: expected a dashboard answering there (start one: "
                           f"python -m experiments.dashboard); cannot reach the dashboard at {url}/api/v1/hyperparams/"), line
    assert "refused" in line.lower(), line


def test_the_recorded_dashboard_is_read_from_a_file_of_the_runs_own_never_through_a_link(tmp_path: Path) -> None:
    """What the line says of where a run reported comes from its configs.yaml: read only where that is
    a file of its own (a link's target is never read, a FIFO never waited on), and a URL's password dropped."""
    from experiments.tweak import recorded_dashboard

    recorded = "dashboard:\n  computed: http://user:secret@127.0.0.1:5005/api/v1/default\n"
    (tmp_path / "configs.yaml").write_text(recorded)
    assert recorded_dashboard(tmp_path) == "http://127.0.0.1:5005/api/v1/default"
    elsewhere = tmp_path / "elsewhere.yaml"
    (tmp_path / "configs.yaml").rename(elsewhere)
    (tmp_path / "configs.yaml").symlink_to(elsewhere)
    assert recorded_dashboard(tmp_path) is None
    (tmp_path / "configs.yaml").unlink()
    os.mkfifo(tmp_path / "configs.yaml")  # nobody writes it: answered at once
    assert recorded_dashboard(tmp_path) is None
