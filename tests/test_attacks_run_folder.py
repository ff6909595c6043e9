"""A run folder is input: whoever may write the data dir may have put links, garbage or a dead
writer's leftovers in it. Each attack here is made for real in the folder of a real short run,
then the real command (`--resume`, `experiments.curves`, `experiments.evaluate`) is run on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.evaluate import main as evaluate_main
from experiments.run.folders import RunFolder
from experiments.run.safe_files import DEAD_WRITERS_FILES, remove_dead_writers_files
from ppo.checkpoint import load_checkpoint, save_checkpoint
from tests import forked_run
from tests.conftest import REPO, refused_in_process
from tests.run_safety_support import (
    PER_UPDATE,
    first_leg,
    refused_resume,
    refused_resume_in_process,
)
from tests.test_experiment import TINY, summary_of

SECRET = "root:$6$not-for-your-eyes$:19000:0:99999:7:::"
LABML_FILES = ("configs.yaml", "run.yaml", "indicators.yaml", "source.diff", "run_log.jsonl")


def _resume(cli, data_dir: Path, run_uuid: str) -> subprocess.CompletedProcess[str]:
    return cli.run("experiments.breakout", "--resume", run_uuid, "--stop-after-env-steps", "none", "--data-dir", str(data_dir))


def _one_line_refusal(cli, result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refusal made before anything started: exit 2, nothing on
    stdout, no traceback, no process left."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and result.stdout == "", result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert cli.leftovers() == []
    return lines[0]


# ---- item 1: nothing is written through a link ------------------------------------------------------

def test_a_link_where_a_run_file_belongs_is_refused_and_its_target_never_written(
        cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """labml rewrites configs.yaml, run.yaml, indicators.yaml and source.diff, and appends to
    run_log.jsonl, with a plain open(): each replaced by a link to a file elsewhere used to be
    overwritten or appended to by `--resume`. The run's own files are links too here. The first
    link is refused by the real command; the others by its main() in this process."""
    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    run_dir, run_uuid = Path(summary["run_dir"]), summary["run_uuid"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for name in (*LABML_FILES, "games.csv", "updates.csv", "summary.json", "run.pid", "checkpoints/checkpoint.1.pt"):
        target = outside / name.replace("/", "-")
        target.write_text(f"{SECRET}\nthe user's own {name}\n")
        path = run_dir / name
        original = path.read_bytes() if path.exists() else None
        path.unlink(missing_ok=True)
        path.symlink_to(target)
        line = (_one_line_refusal(cli, _resume(cli, data_dir, run_uuid)) if name == LABML_FILES[0]
                else refused_in_process(capsys, ["--resume", run_uuid, "--stop-after-env-steps", "none", "--data-dir", str(data_dir)]))
        assert line == (f"error: --resume {run_uuid}: expected a run folder of plain files and folders ({path} is a "
                        "symbolic link, which would be read or written through; nothing was read or written)"), name
        assert target.read_text() == f"{SECRET}\nthe user's own {name}\n", name
        path.unlink()
        if original is not None:
            path.write_bytes(original)


def test_a_second_hard_link_of_a_file_labml_rewrites_is_refused(cli, tmp_path: Path) -> None:
    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    run_dir = Path(summary["run_dir"])
    victim = tmp_path / "victim.yaml"
    victim.write_text("the user's own file\n")
    (run_dir / "run.yaml").unlink()
    os.link(victim, run_dir / "run.yaml")
    line = _one_line_refusal(cli, _resume(cli, data_dir, summary["run_uuid"]))
    assert f"({run_dir / 'run.yaml'} has 2 hard links, and labml rewrites it in place (the file of its other names would change too);" in line
    assert victim.read_text() == "the user's own file\n"


def test_a_run_folder_that_is_itself_a_link_is_refused(cli, tmp_path: Path) -> None:
    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    run_dir = Path(summary["run_dir"])
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    run_dir.symlink_to(moved)
    line = _one_line_refusal(cli, _resume(cli, data_dir, summary["run_uuid"]))
    assert f"({run_dir} is a symbolic link, not a folder;" in line


def test_a_fifo_where_a_record_belongs_is_refused_rather_than_read(cli, tmp_path: Path) -> None:
    """Reading a FIFO would wait for a writer forever."""
    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    games = Path(summary["run_dir"]) / "games.csv"
    games.unlink()
    os.mkfifo(games)
    line = _one_line_refusal(cli, _resume(cli, data_dir, summary["run_uuid"]))
    assert f"({games} is not a regular file (a device, FIFO or socket); nothing was read or written)" in line


# ---- item 2: a refusal never shows another file's content ----------------------------------------------

def test_a_resume_refusal_names_the_record_never_its_content(cli, tmp_path: Path) -> None:
    """games.csv replaced by a copy of a secret file (no link: a plain file someone wrote there)."""
    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    games = Path(summary["run_dir"]) / "games.csv"
    games.write_text(f"{SECRET}\nsecond line\n")
    line = _one_line_refusal(cli, _resume(cli, data_dir, summary["run_uuid"]))
    assert line == (f"error: --resume {summary['run_uuid']}: expected a run whose records can be read ({games}: expected "
                    "the header env_step,update,score,length,truncated on its first line (it holds something else))")
    assert "not-for-your-eyes" not in line


CURVES_FILES = {
    "a secret file": (f"{SECRET}\n".encode(), ": expected the header env_step,update,score,length,truncated on its "
                                              "first line (it holds something else)"),
    "binary garbage": (b"\xff\xfe\x00garbage" * 100, ": not UTF-8 text (byte 0 cannot be decoded)"),
    "a row with a secret": (f"env_step,update,score,length,truncated\n{SECRET},x,y\n".encode(),
                            ":2: 3 cells, expected 5 (env_step,update,score,length,truncated)"),
    "a cell that is not a number": (f"env_step,update,score,length,truncated\n1,1,{SECRET[:4]},4,0\n".encode(),
                                    ":2: not a row of env_step,update,score,length,truncated (its score is not a number)"),
    "a NUL byte": (b"env_step,update,score,length,truncated\n1,1,\x00,4,0\n",
                   ":2: not a row of env_step,update,score,length,truncated (its score is not a number)"),
}


@pytest.mark.parametrize("kind", [*CURVES_FILES, "a link to a secret file", "a folder", "a FIFO"])
def test_curves_on_a_crafted_run_folder_is_one_line_naming_the_file(cli, tmp_path: Path, kind: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    games = run_dir / "games.csv"
    secret = tmp_path / "secret"
    secret.write_text(f"{SECRET}\n")
    if kind == "a link to a secret file":
        games.symlink_to(secret)
        expected = (f"{games}: expected the header env_step,update,score,length,truncated on its first line "
                    "(it holds something else)")
    elif kind == "a folder":
        games.mkdir()
        (games / "games.csv").write_text("env_step,update,score,length,truncated\n")  # found by the glob as a run too
        expected = f"{games}: not a regular file (a folder, device, FIFO or socket)"
    elif kind == "a FIFO":
        os.mkfifo(games)
        expected = f"{games}: not a regular file (a folder, device, FIFO or socket)"
    else:
        data, why = CURVES_FILES[kind]
        games.write_bytes(data)
        expected = f"{games}{why}"
    result = cli.run("experiments.curves", "--runs", f"A={run_dir}", "--out", str(tmp_path / "out"), timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [f"error: --runs A={run_dir}: {expected}"]
    assert "not-for-your-eyes" not in result.stderr + result.stdout


# ---- item 4: what a killed writer left is removed; a refusal never advises the unsafe load ------------

KILLED_MID_CHECKPOINT = """
import os, signal, sys
real_fsync = os.fsync
def fsync_then_die(fd):
    real_fsync(fd)
    name = os.readlink(f"/proc/self/fd/{fd}")
    if "/..checkpoint.pt.next." in name and name.endswith(".tmp") and os.path.exists(name.rsplit("/", 2)[0] + "/checkpoints/checkpoint.pt"):
        os.kill(os.getpid(), signal.SIGKILL)  # the second checkpoint's bytes are written, not yet renamed
os.fsync = fsync_then_die
from experiments.breakout import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_kill_9_mid_checkpoint_leaves_a_temp_file_the_resume_removes(cli, tmp_path: Path) -> None:
    data_dir = tmp_path / "runs"
    killed = forked_run.run([sys.executable, "-c", KILLED_MID_CHECKPOINT, "--updates", "3", *TINY, "--checkpoint-every", "1",
                             "--data-dir", str(data_dir)], cwd=REPO, env=cli.env(), text=True, timeout=300,
                            start_new_session=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert cli.leftovers() == []  # the workers saw their trainer go
    (run_dir,) = data_dir.glob("breakout/*")
    checkpoints = RunFolder.at(run_dir).newest_checkpoint.parent
    (left,) = [p for p in checkpoints.iterdir() if p.name.startswith("..checkpoint.pt.next.")]
    assert DEAD_WRITERS_FILES.fullmatch(left.name) and left.stat().st_size > 100_000
    assert load_checkpoint(RunFolder.at(run_dir).newest_checkpoint)["update"] == 1
    keep = [checkpoints / "notes.tmp", checkpoints / ".checkpoint.pt.next.tmp.mine", run_dir / "my.tmp"]
    for path in keep:
        path.write_text("not a writer's temp file\n")
    resumed = _resume(cli, data_dir, run_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary_of(resumed.stdout)["env_steps"] == 3 * PER_UPDATE
    assert not left.exists()
    assert all(path.read_text() == "not a writer's temp file\n" for path in keep)
    assert cli.leftovers() == []


def test_each_checkpoint_removes_a_dead_writers_temp_files_and_nothing_else(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    dead = [folder / "..checkpoint.pt.next.a1b2c3d4.tmp", folder / ".checkpoint.pt.next", folder / ".checkpoint.1.pt.link",
            folder / ".summary.json.zz_9y8x7.tmp"]
    kept = [folder / "checkpoint.9.pt", folder / ".checkpoint.pt.next.a1b2c3d.tmp", folder / "x.a1b2c3d4.tmp"]
    for path in dead + kept:
        path.write_bytes(b"x")
    outside = tmp_path / "outside.tmp"
    outside.write_text("kept\n")
    link = folder / "..checkpoint.pt.next.linklink.tmp"
    link.symlink_to(outside)
    RunFolder.at(tmp_path).rotate_in(lambda path: path.write_bytes(b"new"))
    assert sorted(p.name for p in folder.iterdir()) == sorted([p.name for p in kept] + ["checkpoint.pt"])
    assert outside.read_text() == "kept\n"  # the link was removed, not followed
    assert remove_dead_writers_files(tmp_path / "missing") == []


class NotPlainData:
    pass


def test_a_refused_custom_class_checkpoint_never_suggests_the_unsafe_load(cli, tmp_path: Path) -> None:
    import torch
    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    real = load_checkpoint(Path(summary["checkpoint"]))
    for path in RunFolder.at(Path(summary["run_dir"])).checkpoints:
        if path.exists():
            torch.save({**real, "extra": NotPlainData()}, path)
    for result in (_resume(cli, data_dir, summary["run_uuid"]),
                   cli.run("experiments.evaluate", "--checkpoint", summary["checkpoint"], "--games", "1")):
        line = _one_line_refusal(cli, result)
        assert "is not a checkpoint of this project" in line and "NotPlainData" in line, line
        for advice in ("weights_only=False", "weights_only` set to `False", "will likely succeed", "safe_globals", "trust"):
            assert advice not in line, line


def test_saving_never_follows_a_link_to_the_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"the user's")
    link = tmp_path / "checkpoint.pt"
    link.symlink_to(target)
    save_checkpoint(link, {"model": {}, "config": {}})  # replaced by rename: the link itself goes
    assert target.read_bytes() == b"the user's" and not link.is_symlink()


def test_a_film_never_writes_through_a_link_planted_at_its_temporary_name(cli, tmp_path: Path) -> None:
    """F7 (issue 71): `evaluate --video NAME` wrote the film through a link planted at
    `.NAME.partial.mp4` in the run's folder, into whatever file the link named."""
    summary = first_leg(cli, tmp_path / "runs")
    run_dir = Path(summary["run_dir"])
    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's")
    (run_dir / ".film.partial.mp4").symlink_to(victim)
    result = cli.run("experiments.evaluate", "--checkpoint", summary["checkpoint"], "--games", "1", "--video", "film.mp4")
    assert result.returncode == 0, result.stderr[-2000:]
    assert victim.read_bytes() == b"the user's"
    film = run_dir / "film.mp4"
    assert not film.is_symlink() and film.read_bytes()[4:8] == b"ftyp"  # an MP4 of its own
    assert not os.path.lexists(run_dir / ".film.partial.mp4")


# ---- item 3: garbage emulator states are refused before any worker starts -------------------------------

@pytest.mark.parametrize("garbage", ["random bytes", "a cut state", "an oversized state"])
def test_garbage_emulator_states_in_a_checkpoint_are_refused_in_one_line(
        cli, tmp_path: Path, garbage: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Random bytes in the saved ALE states used to make every worker fail, be replaced and fail
    again, then end the resume in a WorkerKeepsFailing traceback. Random bytes are refused by the
    real command; the other two by its main() in this process (the refusal is made before anything
    starts, so it needs no Python of its own)."""
    import random

    summary = first_leg(cli, tmp_path)
    noise = random.Random(39)
    for path in RunFolder.at(Path(summary["run_dir"])).checkpoints:
        if path.exists():
            state = load_checkpoint(path)
            first = dict(state["env_states"][0])
            ale = first["ale"]
            first["ale"] = {"random bytes": noise.randbytes(len(ale)), "a cut state": ale[: len(ale) // 2],
                            "an oversized state": bytes(2**20 + 1)}[garbage]
            save_checkpoint(path, {**state, "env_states": [first, *state["env_states"][1:]]})
    lines = (refused_resume(cli, tmp_path, summary) if garbage == "random bytes"
             else refused_resume_in_process(capsys, tmp_path, summary))
    newest = RunFolder.at(Path(summary["run_dir"])).newest_checkpoint
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {newest}: expected a checkpoint written by python -m experiments.breakout (the checkpoint's env_states[0] "), lines
    assert lines[0].endswith("; nothing was started)"), lines
    if garbage == "an oversized state":
        assert "is not an emulator state (1,048,577 bytes, expected 1 to 1,048,576)" in lines[0]


def test_a_checkpoint_that_is_another_file_is_refused_without_quoting_it(
        cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torch's loader quotes the byte it choked on ("invalid load key, 'r'"): not passed on. The
    file itself is given to the real command; the link to it to its main() in this process."""
    secret = tmp_path / "secret"
    secret.write_text(f"{SECRET}\n")
    link = tmp_path / "checkpoint.pt"
    link.symlink_to(secret)
    for path in (secret, link):
        argv = ["--checkpoint", str(path), "--games", "1"]
        line = (_one_line_refusal(cli, cli.run("experiments.evaluate", *argv)) if path == secret
                else refused_in_process(capsys, argv, evaluate_main))
        assert f"checkpoint {path} is corrupt or truncated (" in line, line
        assert "'r'" not in line and "root" not in line.replace(str(tmp_path), ""), line


def test_a_stride_0_tensor_of_a_trillion_elements_is_refused_by_resume_and_evaluate_before_any_copy(
        cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tensor of 10⁶×10⁶ elements that all share one 4-byte place in its storage: a few bytes on
    disk, 4 TB once anything computes on it. `--resume` tried to allocate it (a 25-line traceback);
    both commands now refuse the file, before a byte of it is copied, in the same one line, made in
    one place (ppo/checkpoint.py `read_resume_point`): `--resume` and `evaluate --run` by the real
    commands, `evaluate --checkpoint` by its main() in this process."""
    import torch

    data_dir = tmp_path / "runs"
    summary = first_leg(cli, data_dir)
    huge = torch.zeros(1).expand(10**6, 10**6)
    assert huge.untyped_storage().nbytes() == 4 and huge.stride() == (0, 0)
    for path in RunFolder.at(Path(summary["run_dir"])).checkpoints:
        if path.exists():
            state = load_checkpoint(path)
            torch.save({**state, "model": {**state["model"], "policy.weight": huge}}, path)
    newest = RunFolder.at(Path(summary["run_dir"])).newest_checkpoint
    line = (f"error: {newest}: expected a checkpoint written by python -m experiments.breakout (the checkpoint's model['policy.weight'] is a tensor "
            "of shape (1000000, 1000000) with strides (0, 0) over 4 bytes: expected one whose every element has a place "
            "of its own (nothing in it was used))")
    run_uuid = summary["run_uuid"]
    resumed = _one_line_refusal(cli, _resume(cli, data_dir, run_uuid))
    evaluated = cli.run("experiments.evaluate", "--run", run_uuid[:8], "--data-dir", str(data_dir), "--games", "1")
    by_path = refused_in_process(capsys, ["--checkpoint", str(newest), "--games", "1"], evaluate_main)
    assert resumed == _one_line_refusal(cli, evaluated) == by_path == line  # the same file, the same line

