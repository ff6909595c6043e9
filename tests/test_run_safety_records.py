"""A resume reads the run's own records (games.csv, updates.csv) before anything starts: rows it
cannot read or that stop short of the checkpoint are refused in one line, a last line cut short
after the checkpoint is dropped; a resume told to stop before its own steps is refused; and every
file of a run gets one mode."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from experiments.run.folders import RunFolder, file_mode
from experiments.run.games_csv import read_games
from experiments.run.updates_csv import read_updates
from tests.conftest import refused_in_process, run_once
from tests.run_safety_support import (
    PER_UPDATE,
    first_leg,
    refused_before_anything_started,
    refused_resume,
    refused_resume_in_process,
    two_checkpointed_updates,
)
from tests.test_cli_help import probed
from tests.test_experiment import summary_of


@pytest.mark.parametrize(("record", "bad_row", "why"), [
    ("games.csv", "1,2,three,4,0", "not a row of env_step,update,score,length,truncated (its score is not a number)"),
    ("updates.csv", "2,64" + ",x" * 20, "not a row of numbers (its learning_rate is not a number)"),
])
def test_a_resume_refuses_a_run_whose_records_cannot_be_read_before_anything_starts(
        cli, tmp_path: Path, record: str, bad_row: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-edited or truncated games.csv / updates.csv used to end the resume in a traceback
    after the game workers had started; now it is one line and nothing in the run folder changes.
    games.csv is refused by the real command, updates.csv by its main() in this process (the refusal
    is made before anything starts, so it needs no Python of its own)."""
    summary = first_leg(cli, tmp_path)
    run_dir = Path(summary["run_dir"])
    path = run_dir / record
    rows = path.read_text().splitlines()
    path.write_text("\n".join([*rows, bad_row]) + "\n")
    refused = (refused_resume(cli, tmp_path, summary) if record == "games.csv"
               else refused_resume_in_process(capsys, tmp_path, summary))
    assert refused == [
        f"error: --resume {summary['run_uuid']}: expected a run whose records can be read "
        f"({path}:{len(rows) + 1}: {why})"]


GAMES_LEG = ["--updates", "6", "--n-workers", "1", "--envs-per-worker", "2", "--worker-steps", "128",
             "--minibatches", "2", "--epochs", "1", "--stop-after-env-steps", str(3 * 256)]


def leg_with_games(cli, tmp_path: Path) -> dict:
    """3 of 6 updates of 256 agent steps, long enough for games to end before the checkpoint; made
    once a session and copied here (conftest.run_once)."""
    summary = run_once(cli, tmp_path, *GAMES_LEG)
    assert summary["updates"] == 3 and summary["games"] >= 1  # the premise of the tests below
    return summary


def test_a_resume_drops_a_last_line_cut_short_after_the_checkpoint(cli, tmp_path: Path) -> None:
    """A machine that loses power (or a disk that fills) in the middle of an append leaves a last
    line without its line end. Past the checkpoint it is work the resume does again, so the resume
    drops it and says so, where it used to refuse the run ('expected a run whose records can be read')."""
    summary = leg_with_games(cli, tmp_path)
    run_dir = Path(summary["run_dir"])
    games_before = (run_dir / "games.csv").read_text()
    updates_before = (run_dir / "updates.csv").read_text()
    cut = {"games.csv": "1001,4,1", "updates.csv": "4,1024,0.000125,0.0"}  # rows of update 4, cut mid-cell
    for name, text in cut.items():
        with (run_dir / name).open("a", newline="") as f:
            f.write(text)
    # One update past the checkpoint (update 4, the cut rows' own) is enough to see them replaced.
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", str(4 * 256),
                      "--data-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for name, before in (("games.csv", games_before), ("updates.csv", updates_before)):
        line = before.count("\n") + 1
        assert (f"note: {run_dir / name}:{line} was cut short in the middle of an append when the run ended; "
                "it comes after the checkpoint, and the resume drops it") in resumed.stderr.splitlines()
        after = (run_dir / name).read_text()
        assert after.startswith(before) and cut[name] not in after.splitlines() and after.endswith("\n")
    games = read_games(run_dir / "games.csv")
    assert len(games) == summary_of(resumed.stdout)["games"] and [g.update for g in games] == sorted(g.update for g in games)
    assert [row["update"] for row in read_updates(run_dir / "updates.csv")] == [1, 2, 3, 4]
    assert cli.leftovers() == []


@pytest.mark.parametrize("record", ["games.csv", "updates.csv"])
def test_a_resume_refuses_a_line_cut_short_before_the_checkpoint(cli, tmp_path: Path, record: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A last line cut short that the checkpoint still counts (its whole rows stop short of the
    checkpoint's games or update): dropping it would leave a gap, so the resume refuses in one line
    and changes nothing. games.csv is refused by the real command, updates.csv by its main() in this
    process (the refusal is made before anything starts)."""
    summary = leg_with_games(cli, tmp_path)
    run_dir = Path(summary["run_dir"])
    path = run_dir / record
    text = path.read_text()
    path.write_text(text[:-2])  # the last row loses its last two characters, its line end among them
    lines = text.count("\n")  # the cut row is the file's last line
    whole = lines - 2  # rows before it (less the header)
    what = f"the {summary['games']} games its checkpoint counts" if record == "games.csv" else "update 3, its checkpoint's"
    refused = (refused_resume(cli, tmp_path, summary) if record == "games.csv"
               else refused_resume_in_process(capsys, tmp_path, summary))
    assert refused == [
        f"error: --resume {summary['run_uuid']}: expected a run whose records reach its checkpoint ({path}:{lines} was "
        f"cut short in the middle of an append, and the {whole} whole rows before it do not reach {what})"]


# ---- issue 39 item 10: a resume that would stop before where it is ---------------------------------

def test_a_resume_told_to_stop_before_its_own_steps_is_refused(cli, tmp_path: Path) -> None:
    """It used to print "resumed at update 1 of 1" and mark the run completed."""
    summary = first_leg(cli, tmp_path)  # 1 update of 32 agent steps, stopped there by --stop-after-env-steps 32
    resumed = cli.run("experiments.breakout", "--resume", summary["run_uuid"], "--stop-after-env-steps", "16",
                      "--data-dir", str(tmp_path))
    refused_before_anything_started(cli, resumed, f"error: --stop-after-env-steps 16: expected at least the run's own "
                                                   f"{PER_UPDATE} agent steps (update 1 of 3), or none, to resume it")
    assert json.loads((Path(summary["run_dir"]) / "summary.json").read_text()) == summary


def test_a_stop_below_every_kept_checkpoints_steps_is_refused_before_torch_loads(
        cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Answered without the seconds torch takes to load, or the checkpoint's whole read: from the
    checkpoints' own counts, read without torch. The command runs with torch made unimportable
    (tests/test_cli_help.py's probe), which sees any attempt to import it, and says the same line. A stop below only the newest one's steps is left to the
    full read, which may go on from the one before it: the same line while the newest is good, the
    one before it's when it is not."""
    summary = two_checkpointed_updates(cli, tmp_path)  # checkpoint.pt at update 2 (64 agent steps), checkpoint.1.pt at 1 (32)
    run_dir, resume = Path(summary["run_dir"]), ["--resume", summary["run_uuid"], "--data-dir", str(tmp_path)]

    def files() -> dict[Path, bytes]:
        return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    before = files()
    result, probe = probed(tmp_path, "experiments.breakout", *resume, "--stop-after-env-steps", "16")
    assert probe == {"code": 2, "attempted": [], "loaded": []}, result.stderr[-2000:]
    assert (result.stdout, result.stderr.strip().splitlines()) == ("", [
        f"error: --stop-after-env-steps 16: expected at least the run's own {2 * PER_UPDATE} agent steps (update 2 of 3), "
        "or none, to resume it"])
    between = refused_in_process(capsys, [*resume, "--stop-after-env-steps", "48"])
    assert between == (f"error: --stop-after-env-steps 48: expected at least the run's own {2 * PER_UPDATE} agent steps "
                       "(update 2 of 3), or none, to resume it")
    assert files() == before
    newest = RunFolder.at(run_dir).newest_checkpoint
    newest.write_bytes(newest.read_bytes()[:-200])  # truncated: its counts are no answer, and the full read skips it
    fallback = refused_in_process(capsys, [*resume, "--stop-after-env-steps", "16"])
    assert fallback == (f"error: --stop-after-env-steps 16: expected at least the run's own {PER_UPDATE} agent steps "
                        "(update 1 of 3), or none, to resume it")


# ---- file modes ----------------------------------------------------------------------------------

def test_every_file_of_a_run_has_the_same_umask_mode(cli, tmp_path: Path) -> None:
    # The modes the run wrote: run_once's copy keeps each file's mode, and rewrites summary.json and
    # configs.yaml in place (their mode unchanged).
    run_dir = Path(two_checkpointed_updates(cli, tmp_path)["run_dir"])
    modes = {str(p.relative_to(run_dir)): oct(stat.S_IMODE(p.stat().st_mode)) for p in run_dir.rglob("*") if p.is_file()}
    assert {"summary.json", "games.csv", "run.yaml", "checkpoints/checkpoint.pt", "checkpoints/checkpoint.1.pt"} <= set(modes)
    assert set(modes.values()) == {oct(file_mode())}, json.dumps(modes, indent=1)
