"""A population folder is input, as a run folder is: whoever may write the data dir may have put
links, special files or a crafted population.json in it. Each attack is made for real in a copy
of a real finished population (the session's, run once through the real command), then `pbt --resume`
is run on it: through the real command line where the test says so, otherwise through its main()
in this process (every refusal here comes before Ray, the dashboard or a member starts).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from experiments.pbt import main
from tests import forked_run
from tests.conftest import REPO, Cli
from tests.pbt_support import run_dir_of

SECRET = "the user's own file, not for the population to write\n"


@pytest.fixture(scope="module")
def finished(finished_population: dict[str, Any]) -> Path:
    """The data dir of a real population of 2 (6 updates each, an exploit after update 3), finished:
    the session's (tests/conftest.py), which the tests here only copy."""
    assert finished_population["leftovers"] == []
    return finished_population["data"]


def copy_of(finished: Path, tmp_path: Path) -> Path:
    """The finished population's folder in a data dir of this test's, its record pointing there."""
    data = tmp_path / "runs"
    shutil.copytree(finished, data, symlinks=True)
    (folder,) = data.glob("breakout/pbt-*")
    state = json.loads((folder / "population.json").read_text())
    state["fixed"]["data_dir"] = str(data)
    (folder / "population.json").write_text(json.dumps(state, indent=1))
    return folder


def snapshot(root: Path) -> dict[str, Any]:
    """Every entry under `root` as lstat sees it: a link's target, a file's bytes, a folder."""
    seen: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            seen[str(path)] = ("link", os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            seen[str(path)] = ("file", path.read_bytes(), info.st_mtime_ns)
        else:
            seen[str(path)] = ("other", stat.S_IFMT(info.st_mode))
    return seen


def refused(capsys: pytest.CaptureFixture[str], folder: Path) -> str:
    """`pbt --resume folder` in this process: exit 2, one stderr line (returned), nothing on stdout."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--resume", str(folder)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and out == "" and "Traceback" not in err, (out, err[-3000:])
    return lines[0]


# ---- links and special files in the population folder -----------------------------------------------

# Each file a resume writes (or, for a population's record, replaces), as the attack on main found them.
WRITTEN = ["dashboard/dashboard.lock", "dashboard/dashboard.log", ".population.json.next", "population.json",
           "lineage.csv", "lineage.png"]


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("name", WRITTEN)
def test_a_link_in_a_population_folder_is_refused_before_anything_is_written(
        finished: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    folder = copy_of(finished, tmp_path)
    target = tmp_path / "victim"
    target.write_text(SECRET)
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(target)
    before = snapshot(tmp_path)
    line = refused(capsys, folder)
    assert line == (f"error: --resume {folder}: expected a population folder of plain files and folders ({folder / name} "
                    "is a symbolic link, which would be read or written through; nothing was read or written)")
    assert snapshot(tmp_path) == before  # the target, and everything else, as it was


@pytest.mark.ray
@pytest.mark.slow
def test_a_link_is_refused_by_the_real_command_and_nothing_starts(finished: Path, tmp_path: Path) -> None:
    folder = copy_of(finished, tmp_path)
    target = tmp_path / "victim"
    target.write_text(SECRET)
    (folder / "dashboard" / "dashboard.lock").unlink()
    (folder / "dashboard" / "dashboard.lock").symlink_to(target)
    before = snapshot(tmp_path)
    cli = Cli()
    result = cli.run("experiments.pbt", "--resume", str(folder))
    assert result.returncode == 2 and result.stdout == "", result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --resume {folder}: expected a population folder of plain files and folders ({folder / 'dashboard' / 'dashboard.lock'} "
        "is a symbolic link, which would be read or written through; nothing was read or written)"]
    assert snapshot(tmp_path) == before
    assert cli.leftovers() == []  # no Ray, no dashboard, no member


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("name", ["dashboard/dashboard.lock", "lineage.csv", "population.json"])
def test_a_second_hard_link_in_a_population_folder_is_refused(finished: Path, tmp_path: Path, name: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = copy_of(finished, tmp_path)
    victim = tmp_path / "victim"
    shutil.copyfile(folder / name, victim)  # a file the user keeps, that the name now also reaches
    (folder / name).unlink()
    os.link(victim, folder / name)
    before = snapshot(tmp_path)
    line = refused(capsys, folder)
    assert line == (f"error: --resume {folder}: expected a population folder of plain files and folders ({folder / name} has 2 "
                    "hard links, and a population folder's files have one name each (the file of its other names would "
                    "change too); nothing was read or written)")
    assert snapshot(tmp_path) == before


@pytest.mark.ray
@pytest.mark.slow
def test_a_fifo_or_a_folder_that_is_a_link_is_refused(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = copy_of(finished, tmp_path)
    (folder / "lineage.csv").unlink()
    os.mkfifo(folder / "lineage.csv")  # reading it would wait for a writer forever
    assert f"({folder / 'lineage.csv'} is not a regular file (a device, FIFO or socket);" in refused(capsys, folder)
    os.unlink(folder / "lineage.csv")
    moved = tmp_path / "moved"
    folder.rename(moved)
    folder.symlink_to(moved)
    assert f"({folder} is a symbolic link, not a folder;" in refused(capsys, folder)


@pytest.mark.ray
@pytest.mark.slow
def test_a_link_in_a_members_run_folder_is_refused_before_any_member_starts(
        finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = copy_of(finished, tmp_path)
    state = json.loads((folder / "population.json").read_text())
    run_dir = run_dir_of(tmp_path / "runs", state["members"][1]["run_uuid"])
    assert run_dir is not None
    target = tmp_path / "victim"
    target.write_text(SECRET)
    (run_dir / "run.yaml").unlink()
    (run_dir / "run.yaml").symlink_to(target)
    line = refused(capsys, folder)
    assert line == (f"error: --resume {folder}: expected member 1's run folder of plain files and folders ({run_dir / 'run.yaml'} "
                    "is a symbolic link, which would be read or written through; nothing was read or written)")
    assert target.read_text() == SECRET


# ---- population.json, field by field ------------------------------------------------------------------

def edited(state: dict[str, Any], change: str) -> Any:
    """The record with one change, as a person or a program may have made it."""
    if change == "[]":
        return []
    if change == "no members":
        return {k: v for k, v in state.items() if k != "members"}
    key, _, value = change.partition("=")
    if "." in key:
        outer, inner = key.split(".")
        return {**state, outer: {**state[outer], inner: json.loads(value)}}
    return {**state, key: json.loads(value)}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize(("change", "message"), [
    ("[]", "population.json holds []: expected a JSON object with the keys folder, interval, explore, "),
    ("no members", "population.json has no members: expected a JSON object with the keys folder, interval, "),
    ("interval=0", "population.json's interval is 0: expected an integer from 1 to 5"),
    ("cpus_per_member=NaN", "population.json's cpus_per_member is NaN: expected a number > 0 and ≤ 1024"),
    ("max_retries=-1", "population.json's max_retries is -1: expected an integer from 0 to 100"),
    ("generation=3", "population.json's generation is 3: expected an integer from 0 to 2, the population's segments"),
    ('explore=["gamma"]', "population.json's explore is [\"gamma\"]: expected a list of distinct live hyperparameters from "),
    ('members=[{"run_uuid": "x", "seed": 0}, {"run_uuid": "y", "seed": 1}]',
     "population.json's members[0].run_uuid is \"x\": expected the uuid of a run (32 hex digits)"),
    ("fixed.learning_rate=NaN", "population.json's fixed options: --learning-rate nan: expected a finite number"),
    ('fixed.epochs="many"', "population.json's fixed.epochs is \"many\": expected an integer"),
    ('unqueued={"0": {"learning_rate": 5}}', "population.json's unqueued.0.learning_rate is 5: expected a value in [0, 0.01]"),
    ("cpus_per_member=" + "9" * 400, "population.json's cpus_per_member is 999999999"),  # past a float: no traceback
    ('unqueued={"1": {"epochs": ' + "9" * 400 + "}}", "population.json's unqueued.1.epochs is 9999"),
    ('private_dashboard="\\u001b[2J"', "population.json's private_dashboard is \"\\u001b[2J\": expected true, or false with "),
])
def test_a_bad_field_of_population_json_is_one_line_naming_it(finished: Path, tmp_path: Path, change: str, message: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = copy_of(finished, tmp_path)
    state = json.loads((folder / "population.json").read_text())
    (folder / "population.json").write_text(json.dumps(edited(state, change)))
    before = snapshot(tmp_path)
    line = refused(capsys, folder)
    assert line.startswith(f"error: --resume {folder}: {message}"), line
    assert snapshot(tmp_path) == before


@pytest.mark.ray
@pytest.mark.slow
def test_population_json_that_is_not_json_is_refused_by_the_real_command_without_quoting_it(finished: Path, tmp_path: Path) -> None:
    folder = copy_of(finished, tmp_path)
    (folder / "population.json").write_text("root:$6$not-for-your-eyes$:19000\x1b[2J")
    result = Cli().run("experiments.pbt", "--resume", str(folder))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --resume {folder}: population.json is not JSON (line 1, column 1: Expecting value)"]


def test_a_refused_resume_never_imports_ray() -> None:
    """Why the refusals above may run in this process: main() refuses before Ray is even imported."""
    probe = ("import sys\nfrom experiments.pbt import main\ntry:\n    main(['--resume', sys.argv[1]])\nexcept SystemExit as e:\n"
             "    print(e.code, 'ray' in sys.modules)")
    import subprocess
    answer = subprocess.run([sys.executable, "-c", probe, "/nonexistent/pbt-x"], cwd=REPO, capture_output=True, text=True, check=True)
    assert answer.stdout.split() == ["2", "False"], answer.stderr[-2000:]


# ---- links planted after the checks, while the population runs ------------------------------------------

def test_a_populations_own_writes_never_follow_a_link_planted_while_it_runs(tmp_path: Path) -> None:
    """What a resume writes after its checks: lineage.csv appended (a symbolic link, a hard link or
    a FIFO in its place is refused before a byte is written), population.json and lineage.png
    replaced whole (a link in their place, or where the old code staged population.json, is
    replaced, never written through)."""
    from experiments.pbt.lineage import append_rows, plot, read_rows
    from experiments.pbt.state import Population
    from experiments.run.safe_files import UnsafeRunFolder

    folder = tmp_path / "pbt"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    row = {"update": 3, "member": 1, "copied_from": 0, "changes": "epochs=2"}
    (folder / "lineage.csv").symlink_to(victim)
    with pytest.raises(UnsafeRunFolder, match="cannot be opened without following a link"):
        append_rows(folder / "lineage.csv", [row])
    (folder / "lineage.csv").unlink()
    os.link(victim, folder / "lineage.csv")
    with pytest.raises(UnsafeRunFolder, match="a file with 2 hard links"):
        append_rows(folder / "lineage.csv", [row])
    (folder / "lineage.csv").unlink()
    os.mkfifo(folder / "lineage.csv")  # no reader: refused at once, never waited on
    with pytest.raises(UnsafeRunFolder):
        append_rows(folder / "lineage.csv", [row])
    (folder / "lineage.csv").unlink()
    os.mkfifo(folder / "lineage.csv")  # read back for the plot after each generation: refused at once, never waited on
    with pytest.raises(UnsafeRunFolder, match="is not a regular file"):
        read_rows(folder / "lineage.csv")
    (folder / "lineage.csv").unlink()
    append_rows(folder / "lineage.csv", [row])  # a file of its own is written as before
    assert (folder / "lineage.csv").read_bytes() == b"update,member,copied_from,changes,node_id,donor_node_id\r\n3,1,0,epochs=2,,\r\n"
    assert read_rows(folder / "lineage.csv") == [{"update": "3", "member": "1", "copied_from": "0", "changes": "epochs=2",
                                                   "node_id": "", "donor_node_id": ""}]

    for name in ("population.json", ".population.json.next", "lineage.png"):
        (folder / name).symlink_to(victim)
    population = Population(str(folder), 3, ["epochs"], 6, 32, {"data_dir": str(tmp_path)},
                            [{"run_uuid": "0" * 32, "seed": 0}, {"run_uuid": "1" * 32, "seed": 1}], 1.0, 1, True)
    population.save()
    plot(folder / "lineage.png", [], [folder])  # a member without updates yet
    assert victim.read_text() == SECRET
    assert not (folder / "population.json").is_symlink() and json.loads((folder / "population.json").read_text())["interval"] == 3
    assert (folder / "lineage.png").read_bytes()[:4] == b"\x89PNG" and not (folder / "lineage.png").is_symlink()


@pytest.mark.slow
def test_the_private_dashboards_log_never_follows_a_link(tmp_path: Path) -> None:
    """The population's dashboard writes its log through a file of its own, whatever was put in its place."""
    from experiments.pbt.population import PrivateDashboard

    data = tmp_path / "pbt" / "dashboard"
    data.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    (data / "dashboard.log").symlink_to(victim)
    with PrivateDashboard(data, tmp_path) as dashboard:
        assert dashboard.url.startswith("http://127.0.0.1:")
    assert victim.read_text() == SECRET
    assert not (data / "dashboard.log").is_symlink() and "Dashboard running at" in (data / "dashboard.log").read_text()


# The population's process as far as its private dashboard: started, its pid and address said, then held.
STARTS_A_DASHBOARD = """
import os, sys, time
from pathlib import Path
from experiments.pbt.population import PrivateDashboard
with PrivateDashboard(Path(sys.argv[1]), Path(sys.argv[2])) as dashboard:
    print(dashboard.process.pid, dashboard.url, flush=True)
    time.sleep(3600)
"""


@pytest.mark.slow
def test_a_populations_dashboard_ends_when_its_process_is_killed_and_a_resume_can_start_one_again(tmp_path: Path) -> None:
    """F2 (issue 71): after `kill -9` of pbt its private dashboard went on serving, and `pbt --resume`
    was then refused ("already used by another dashboard (pid N)")."""
    import psutil

    from experiments.pbt.population import PrivateDashboard

    data = tmp_path / "pbt" / "dashboard"
    driver = forked_run.popen([sys.executable, "-c", STARTS_A_DASHBOARD, str(data), str(tmp_path)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        pid, _ = driver.stdout.readline().split()
        dashboard = psutil.Process(int(pid))
        driver.kill()  # SIGKILL: nothing of the driver's own runs
        driver.wait()
        dashboard.wait(timeout=60)  # ended by the kernel's parent-death signal, not left serving
    finally:
        if driver.poll() is None:
            driver.kill()
    with PrivateDashboard(data, tmp_path) as again:  # what the resume starts, on the same data folder
        assert again.url.startswith("http://127.0.0.1:") and again.process is not None and again.process.pid != int(pid)
