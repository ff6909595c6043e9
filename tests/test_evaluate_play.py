"""Evaluation inside the process: whole games played by a policy (play, play_games), the video
recorder and the training run's film hook, the frame hook filming uses, whether a checkpoint fits
a model, and device names."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from configs.ppo import ConfigError, PPOConfig, device_name
from game.atari import Game, GameSpec
from ppo.checkpoint import CheckpointError
from ppo.devices import resolve_device
from ppo.evaluation import model_from_checkpoint, play, play_games, record_training_video
from ppo.evaluation.film import VideoRecorder
from ppo.model import ActorCritic
from ppo.resume_point import check_fits
from tests.film_checks import assert_browser_playable, read_film

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


def test_the_caption_is_above_the_screen_where_a_players_controls_do_not_cover_it(tmp_path: Path) -> None:
    """A browser draws its controls over the bottom of the picture; the caption sat there (issue 71).
    A red 160×210 screen at scale 1 with a caption: its 30-row strip on top holds the white text, the
    screen starts under it, and the bottom rows are the screen's, red."""
    recorder = VideoRecorder(tmp_path / "caption.mp4", 15.0, scale=1)
    for _ in range(3):
        recorder.write(np.full((210, 160, 3), (200, 0, 0), np.uint8), "score 12  lives 3  step 40")
    recorder.close()
    with av.open(str(tmp_path / "caption.mp4")) as container:
        frame = next(container.decode(video=0)).to_ndarray(format="rgb24").astype(int)
    assert frame.shape == (240, 160, 3)  # 210 + 30
    strip, screen = frame[:30], frame[30:]
    assert (strip.min(axis=2) > 150).sum() > 100  # white text in the strip (about 300 pixels, blurred by H.264)
    assert (screen[:, :, 0] > 150).mean() > 0.95 and (screen[:, :, 1] < 60).mean() > 0.95  # red to the last row


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
    film = read_film(video)
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
