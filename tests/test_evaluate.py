"""Evaluation: whole-game scores, the H.264 MP4 of the first game, and one-line errors on bad input.

A real (tiny) run is trained once through the real CLI; the evaluation CLI is then run on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from configs.ppo import ConfigError, PPOConfig, device_name
from experiments.evaluate import main
from game.atari import Game, GameSpec
from ppo.checkpoint import CheckpointError, check_fits
from ppo.devices import resolve_device
from ppo.evaluation import (
    DEFAULT_GREEDY_EPSILON,
    model_from_checkpoint,
    play,
    play_games,
    record_training_video,
)
from ppo.evaluation.film import VideoRecorder
from ppo.model import ActorCritic

REPO = Path(__file__).resolve().parents[1]
VIDEO_SIZE = (160 * 3, 210 * 3 + 30)  # (width, height): the screen ×3 plus the text strip


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("labml_app_url", None)  # never send the test run to a dashboard
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    data_dir = tmp_path_factory.mktemp("data") / "runs"
    done = _cli("experiments.breakout", "--updates", "1", "--n-workers", "2", "--worker-steps", "8",
                "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    last = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout.strip().splitlines()[-1])
    summary_path = re.search(r"(\S*summary\.json)\s*$", last)
    assert summary_path, last
    summary = json.loads(Path(summary_path.group(1)).read_text())
    checkpoint = Path(summary["checkpoint"])
    assert checkpoint.is_file()
    return {"data_dir": str(data_dir), "uuid": summary["run_uuid"], "checkpoint": str(checkpoint)}


@dataclasses.dataclass
class Film:
    codec: str
    pixel_format: str
    size: tuple[int, int]  # (width, height)
    frames: int  # decoded, not the header's count
    fps: float


def _film(path: Path) -> Film:
    """What PyAV reads back from a video: the codec and format the browser gets, and every frame."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        context = stream.codec_context
        return Film(context.name, context.pix_fmt, (context.width, context.height), frames,
                    float(stream.average_rate))


def _boxes(path: Path) -> list[str]:
    """The MP4's top-level box types, in file order (each box: 4-byte size, 4-byte type)."""
    data, boxes, offset = path.read_bytes(), [], 0
    while offset + 8 <= len(data):
        size = int.from_bytes(data[offset:offset + 4], "big")
        boxes.append(data[offset + 4:offset + 8].decode("ascii"))
        if size < 8:  # 0: to the end of the file; 1: a 64-bit size (not written for films this short)
            break
        offset += size
    return boxes


def assert_browser_playable(film: Film, path: Path) -> None:
    """H.264 in 4:2:0, even sizes, index (moov) before the media (mdat): what a <video> plays while loading."""
    assert (film.codec, film.pixel_format) == ("h264", "yuv420p")
    assert film.size == VIDEO_SIZE and VIDEO_SIZE[0] % 2 == VIDEO_SIZE[1] % 2 == 0
    boxes = _boxes(path)
    assert boxes[0] == "ftyp" and boxes.index("moov") < boxes.index("mdat"), boxes


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
    assert result["update"] == 1 and result["env_steps"] == 2 * 8
    film = _film(video)
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


BAD = {
    "unknown run": (lambda r, t: ["--run", "a" * 32], "--run", "a" * 32),
    "malformed run": (lambda r, t: ["--run", "nope"], "--run", "nope"),
    "run without checkpoint": (lambda r, t: ["--run", _empty_run(r, t)], "--run", "f" * 32),
    "missing checkpoint": (lambda r, t: ["--checkpoint", str(t / "none.pt")], "--checkpoint", "none.pt"),
    "corrupt checkpoint": (lambda r, t: ["--checkpoint", _corrupt(t)], "--checkpoint", "corrupt.pt"),
    "foreign checkpoint": (lambda r, t: ["--checkpoint", _foreign(t)], "--checkpoint", "foreign.pt"),
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


# -- play_games ---------------------------------------------------------------------------------

def _model(seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(n_actions=4, frame_stack=4)  # Breakout's minimal action set


def test_scores_are_the_sum_of_unclipped_rewards_and_replay_exactly() -> None:
    spec = GameSpec("Breakout", seed=123)
    steps: dict[int, list[tuple[int, float]]] = {0: [], 1: []}
    results = play_games(_model(), spec, games=2, seed=7, on_step=lambda g, a, r: steps[g].append((a, r.reward)))
    assert len(results) == 2
    for index, stats in enumerate(results):
        assert not stats.truncated
        assert stats.score >= 0 and stats.score == int(stats.score)
        assert stats.length == len(steps[index])
        assert stats.score == sum(reward for _, reward in steps[index])

    # A plain Game with the same seed and the same actions plays the same first game: playing
    # through a policy changes nothing about the game.
    game = Game(dataclasses.replace(spec, seed=7, clip_rewards=False))
    episode = None
    for t, (action, reward) in enumerate(steps[0]):
        assert episode is None, f"the replayed game ended early, at step {t}"
        result = game.step(action)
        assert result.reward == reward
        episode = result.episode
    game.close()
    assert episode == results[0]

    # Same seed, same game.
    assert play_games(_model(), spec, games=1, seed=7) == results[:1]


def test_torch_threads_are_restored() -> None:
    threads = torch.get_num_threads()
    play_games(_model(), GameSpec(), games=1, max_steps=3, cpu_threads=1)
    assert torch.get_num_threads() == threads


def test_greedy_max_steps_truncates_and_flags_it() -> None:
    results = play_games(_model(), GameSpec(), games=2, greedy=True, epsilon=0.0, max_steps=10)
    assert [(r.length, r.truncated) for r in results] == [(10, True), (10, True)]


def test_failure_mid_game_leaves_no_video(tmp_path: Path) -> None:
    def explode(game: int, action: int, result: object) -> None:
        if game == 0:
            raise KeyboardInterrupt

    video = tmp_path / "v.mp4"
    with pytest.raises(KeyboardInterrupt):
        play_games(_model(), GameSpec(), games=1, video_path=video, on_step=explode)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="games"):
        play_games(_model(), GameSpec(), games=0)
    with pytest.raises(ValueError, match="epsilon"):
        play_games(_model(), GameSpec(), games=1, epsilon=-0.1)
    with pytest.raises(ValueError, match="actions"):
        play_games(ActorCritic(n_actions=6), GameSpec(), games=1)


def test_recorder_rounds_odd_sizes_to_even_and_keeps_an_exact_frame_rate(tmp_path: Path) -> None:
    # An 81×105 screen (width × height) at scale 1: 81 wide → 82, 105 + the 30-pixel strip = 135 → 136.
    # 60/7 fps (frame skip 7) is not a float a time base can hold; it must come out as 60/7.
    recorder = VideoRecorder(tmp_path / "odd.mp4", 60 / 7, scale=1, screen=(105, 81))
    for i in range(7):
        recorder.write(np.full((105, 81, 3), 30 * i, np.uint8), f"frame {i}")
    assert [p.name for p in tmp_path.iterdir()] == [".odd.partial.mp4"]  # nothing at the path until closed
    recorder.close()
    assert [p.name for p in tmp_path.iterdir()] == ["odd.mp4"]
    with av.open(str(tmp_path / "odd.mp4")) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("h264", "yuv420p")
        assert (stream.codec_context.width, stream.codec_context.height) == (82, 136)
        assert stream.average_rate == Fraction(60, 7)
        assert sum(1 for _ in container.decode(stream)) == 7


def test_recorder_refuses_an_unwritable_place_at_once(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"cannot write an H\.264 video at .*missing"):
        VideoRecorder(tmp_path / "missing" / "x.mp4", 15.0)
    assert list(tmp_path.iterdir()) == []


def test_recorder_abort_leaves_nothing(tmp_path: Path) -> None:
    recorder = VideoRecorder(tmp_path / "gone.mp4", 15.0)
    recorder.write(np.zeros((210, 160, 3), np.uint8))
    recorder.abort()
    assert list(tmp_path.iterdir()) == []


def test_training_hook_films_one_game_into_the_run_folder(tmp_path: Path) -> None:
    model = _model()
    model.train()
    rng_state = torch.get_rng_state()
    metrics = record_training_video(model, PPOConfig().to_dict(), tmp_path, update=50, device="cpu")
    assert torch.equal(torch.get_rng_state(), rng_state)  # the trainer's global stream is untouched
    assert model.training  # mode restored
    video = tmp_path / "videos" / "update_000050.mp4"
    assert sorted(p.name for p in video.parent.iterdir()) == [video.name]
    film = _film(video)
    assert_browser_playable(film, video)
    assert film.frames == metrics["eval_length"] + 1 + 4
    assert metrics["eval_score"] >= 0


def test_play_takes_any_policy_and_only_unclipped_games() -> None:
    game = Game(GameSpec(seed=1, clip_rewards=False))
    seen: list[int] = []
    try:
        results = play(lambda observation: seen.append(observation.shape[0]) or 0, game, games=2, max_steps=4)
    finally:
        game.close()
    assert [(r.length, r.truncated) for r in results] == [(4, True), (4, True)]
    assert seen == [4] * 8  # one (frame_stack, 84, 84) observation per step
    clipped = Game(GameSpec(seed=1))
    try:
        with pytest.raises(ValueError, match="clip_rewards"):
            play(lambda observation: 0, clipped, games=1)
    finally:
        clipped.close()


# -- the frame hook filming uses -----------------------------------------------------------------

def test_frame_observer_sees_every_repeat_and_marks_the_frame_a_reset_makes() -> None:
    game = Game(GameSpec(seed=0))
    frames: list[tuple[tuple[int, ...], bool]] = []
    try:
        game.on_frame = lambda rgb, new_game: frames.append((rgb.shape, new_game))
        game.step(0)
        assert frames == [((210, 160, 3), False)]
        game.reset()
        assert frames[1:] == [((210, 160, 3), True)]
        game.on_frame = None
        game.step(0)
        assert len(frames) == 2
    finally:
        game.close()


# -- checkpoints: does it fit, and the model back ------------------------------------------------

def _checkpoint(n_actions: int = 4, frame_stack: int = 4, record_actions: bool = True) -> dict:
    checkpoint = {"config": {"frame_stack": frame_stack}, "model": ActorCritic(n_actions, frame_stack).state_dict()}
    if record_actions:
        checkpoint["n_actions"] = n_actions
    return checkpoint


def test_check_fits_names_what_does_not_fit_and_moves_no_random_stream() -> None:
    checkpoint = _checkpoint()
    rng_state = torch.get_rng_state()
    check_fits(checkpoint, 4, 4, "Breakout")
    assert torch.equal(torch.get_rng_state(), rng_state)
    with pytest.raises(CheckpointError, match=r"^the checkpoint's model has 4 actions; Pong has 6$"):
        check_fits(checkpoint, 6, 4, "Pong")
    with pytest.raises(CheckpointError, match="stacks 4 frames; this config stacks 2"):
        check_fits(checkpoint, 4, 2)
    checkpoint["model"]["value.bias"] = torch.zeros(3)
    with pytest.raises(CheckpointError, match="does not fit this config"):
        check_fits(checkpoint, 4, 4)


def test_check_fits_loads_into_the_model_given() -> None:
    checkpoint = _checkpoint(record_actions=False)  # older checkpoints: the count is read off the policy head
    model = ActorCritic(4)
    check_fits(checkpoint, 4, 4, into=model)
    assert all(torch.equal(t, checkpoint["model"][k]) for k, t in model.state_dict().items())


def test_model_from_checkpoint_is_the_saved_model_in_eval_mode() -> None:
    checkpoint = _checkpoint(n_actions=6, frame_stack=2)
    model = model_from_checkpoint(checkpoint)
    assert not model.training and model.n_actions == 6
    assert all(torch.equal(t, checkpoint["model"][k]) for k, t in model.state_dict().items())
    checkpoint["n_actions"] = 4  # a hand-edited file
    with pytest.raises(CheckpointError, match="does not fit"):
        model_from_checkpoint(checkpoint)


# -- device names ----------------------------------------------------------------------------------

def test_device_names_are_spelled_once_and_resolved_once() -> None:
    for good in ("auto", "cpu", "cuda", "cuda:0", "cuda:12"):
        assert device_name(good) is None, good
    for bad in ("tpu", "", "cuda:", "cuda:x", "cuda:²", "CPU", None):
        assert device_name(bad) == "auto, cpu, cuda or cuda:N", bad
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match=r"^--device tpu: expected auto, cpu, cuda or cuda:N$"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        why = r"\((torch is not compiled with CUDA|no CUDA GPU is visible): torch "
        with pytest.raises(ConfigError, match=rf"^--device cuda:0: expected auto or cpu on this machine {why}"):
            resolve_device("cuda:0")
    else:
        with pytest.raises(ConfigError, match=r"cuda:0 … cuda:"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
