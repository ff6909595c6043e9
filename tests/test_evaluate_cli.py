"""`python -m experiments.evaluate` through the real CLI on a real (tiny) run trained once: whole-game
scores, the H.264 MP4 of the first game, and one-line errors on bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.evaluate import main
from ppo.evaluation import DEFAULT_GREEDY_EPSILON
from tests import forked_run
from tests.conftest import Cli, run_once
from tests.film_checks import assert_browser_playable, read_film
from tests.test_experiment import SMOKE

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("labml_app_url", None)  # never send the test run to a dashboard
    return forked_run.run([sys.executable, "-m", *args], cwd=REPO, env=env, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real run of 2 updates, 2 games × 16 steps: the smoke run, made once a session and copied
    here (conftest.run_once)."""
    data_dir = tmp_path_factory.mktemp("data") / "runs"
    summary = run_once(Cli(), data_dir, *SMOKE)
    checkpoint = Path(summary["checkpoint"])
    assert checkpoint.is_file() and checkpoint.is_relative_to(data_dir)
    return {"data_dir": str(data_dir), "uuid": summary["run_uuid"], "checkpoint": str(checkpoint)}


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# -- the real CLI ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_plays_a_whole_game_and_films_it(run: dict[str, str], tmp_path: Path) -> None:
    video = tmp_path / "x.mp4"
    done = _cli("experiments.evaluate", "--run", run["uuid"], "--data-dir", run["data_dir"], "--games", "1",
                "--video", str(video), "--seed", "3", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    # stdout is the JSON alone, as train's is its summary path alone; the lines for people are on stderr.
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert f"game 1/1: score {result['scores'][0]:g} in {result['lengths'][0]} steps" in done.stderr
    assert any(" ± " in line for line in done.stderr.splitlines()) and f"video of game 1: {video}" in done.stderr
    assert result["games"] == 1 and len(result["scores"]) == 1
    score = result["scores"][0]
    assert score >= 0 and score == int(score)  # Breakout: whole bricks, unclipped
    assert result["mean"] == result["min"] == result["max"] == score and result["std"] == 0.0
    assert result["truncated"] == [False]
    assert result["run_uuid"] == run["uuid"]
    assert result["checkpoint"] == run["checkpoint"]
    assert result["video"] == str(video)
    assert result["greedy"] is False and result["epsilon"] == 0.0
    assert result["update"] == 2 and result["env_steps"] == 2 * 2 * 16
    film = read_film(video)
    assert_browser_playable(film, video)
    # One frame at the start, one per agent step, one per FIRE after each of the 4 lives lost mid-game.
    assert film.frames == result["lengths"][0] + 1 + 4
    assert film.fps == 60 / 4  # real time: one frame per action repeat of 4 emulator frames
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.mp4"]  # no temporary file left behind


def test_checkpoint_alone_greedy(run: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--checkpoint", run["checkpoint"], "--games", "2", "--greedy", "--seed", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["run_uuid"] == run["uuid"]  # read off data_dir/name/<uuid>/checkpoints/
    assert result["greedy"] is True and result["epsilon"] == DEFAULT_GREEDY_EPSILON
    assert result["video"] is None and len(result["scores"]) == 2


def test_run_with_its_own_checkpoint_and_max_steps(run: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--run", run["uuid"], "--data-dir", run["data_dir"], "--checkpoint", run["checkpoint"],
                 "--games", "1", "--max-steps", "5"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["lengths"] == [5] and result["truncated"] == [True]
    assert "truncated" in captured.err.strip().splitlines()[-1]  # the mean ± std line says the scores are partial


def test_a_bare_video_name_films_into_the_run_folder(run: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    # The checkpoint alone names the run: its folder is the one the checkpoint lies in, where the
    # dashboard looks for a run's films (dashboard/videos.py); nothing lands in the current folder.
    run_dir = Path(run["checkpoint"]).parents[1]
    here = set(Path.cwd().iterdir())
    assert main(["--checkpoint", run["checkpoint"], "--games", "1", "--max-steps", "5", "--video", "look.mp4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["video"] == str(run_dir / "look.mp4")  # the run folder is not under the current one: whole
    assert read_film(run_dir / "look.mp4").frames == 5 + 1
    assert set(Path.cwd().iterdir()) == here
    (run_dir / "look.mp4").unlink()


def _loose_checkpoint(run: dict[str, str], tmp_path: Path) -> str:
    loose = tmp_path / "copy.pt"  # in no run folder: a bare --video name has nowhere to go
    shutil.copy(run["checkpoint"], loose)
    return str(loose)


def _folder_in_run(run: dict[str, str], name: str) -> str:
    (Path(run["checkpoint"]).parents[1] / name).mkdir(exist_ok=True)
    return name


# -- bad input: one line naming the option and value, exit 2, nothing written ---------------------

def _other_run_checkpoint(run: dict[str, str], tmp_path: Path) -> str:
    other = tmp_path / "runs" / "breakout" / ("0" * 32) / "checkpoints" / "checkpoint.pt"
    other.parent.mkdir(parents=True)
    shutil.copy(run["checkpoint"], other)
    return str(other)


def _corrupt(tmp_path: Path) -> str:
    path = tmp_path / "corrupt.pt"
    path.write_bytes(Path(REPO / "pyproject.toml").read_bytes())
    return str(path)


def _foreign(tmp_path: Path) -> str:
    path = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    return str(path)


def _empty_run(run: dict[str, str], tmp_path: Path) -> str:
    uuid = "f" * 32
    (Path(run["data_dir"]) / "breakout" / uuid).mkdir(parents=True, exist_ok=True)
    return uuid


WRITTEN_BY = "expected a checkpoint written by python -m experiments.breakout"
BAD = {
    "unknown run": (lambda r, t: ["--run", "a" * 32], "--run", "a" * 32),
    "malformed run": (lambda r, t: ["--run", "nope"], "--run", "nope"),
    "run without checkpoint": (lambda r, t: ["--run", _empty_run(r, t)], "--run", "f" * 32),
    "missing checkpoint": (lambda r, t: ["--checkpoint", str(t / "none.pt")], "--checkpoint", "none.pt"),
    # A file that is no checkpoint: named as the field, in the line a resume of it prints (ppo/checkpoint.py).
    "corrupt checkpoint": (lambda r, t: ["--checkpoint", _corrupt(t)], f"corrupt.pt: {WRITTEN_BY} (", "is not a checkpoint of this"),
    "foreign checkpoint": (lambda r, t: ["--checkpoint", _foreign(t)], f"foreign.pt: {WRITTEN_BY} (", "is not a checkpoint of this"),
    "run and checkpoint disagree": (lambda r, t: ["--run", r["uuid"], "--checkpoint", _other_run_checkpoint(r, t)],
                                    "--checkpoint", "0" * 32),
    "neither run nor checkpoint": (lambda r, t: [], "--run", ""),
    "zero games": (lambda r, t: ["--run", r["uuid"], "--games", "0"], "--games", "0"),
    "games not a number": (lambda r, t: ["--run", r["uuid"], "--games", "lots"], "--games", "lots"),
    "epsilon out of range": (lambda r, t: ["--run", r["uuid"], "--epsilon", "1.5"], "--epsilon", "1.5"),
    "negative seed": (lambda r, t: ["--run", r["uuid"], "--seed", "-1"], "--seed", "-1"),
    "zero max steps": (lambda r, t: ["--run", r["uuid"], "--max-steps", "0"], "--max-steps", "0"),
    "bad device": (lambda r, t: ["--run", r["uuid"], "--device", "tpu"], "--device", "tpu"),
    "video in a missing folder": (lambda r, t: ["--run", r["uuid"], "--video", str(t / "no" / "x.mp4")],
                                  "--video", "x.mp4"),
    "video is a folder": (lambda r, t: ["--run", r["uuid"], "--video", str(t / "d.mp4")], "--video", "d.mp4"),
    "video not mp4": (lambda r, t: ["--run", r["uuid"], "--video", str(t / "x.avi")], "--video", "x.avi"),
    "video a hidden bare name": (lambda r, t: ["--run", r["uuid"], "--video", ".x.mp4"], "--video", ".x.mp4"),
    "video bare name, checkpoint in no run": (lambda r, t: ["--checkpoint", _loose_checkpoint(r, t), "--video", "x.mp4"],
                                              "--video", "./x.mp4"),
    "video bare name of a folder in the run": (lambda r, t: ["--run", r["uuid"], "--video", _folder_in_run(r, "f.mp4")],
                                               "--video", "not a folder"),
    "greedy and sample": (lambda r, t: ["--run", r["uuid"], "--greedy", "--sample"], "--sample", "--greedy"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_exit_2(case: str, run: dict[str, str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    make_args, option, value = BAD[case]
    (tmp_path / "d.mp4").mkdir()
    args = [*make_args(run, tmp_path), "--data-dir", run["data_dir"]]
    before = _files(tmp_path) | _files(Path(run["data_dir"]))
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert option in lines[0] and value in lines[0], lines[0]
    assert _files(tmp_path) | _files(Path(run["data_dir"])) == before  # nothing written


def test_unknown_run_through_the_real_cli(run: dict[str, str]) -> None:
    done = _cli("experiments.evaluate", "--run", "b" * 32, "--data-dir", run["data_dir"], "--games", "1")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "--run " + "b" * 32 in done.stderr
