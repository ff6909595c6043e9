"""Watch and score a trained policy: whole games (all lives), played in-process, optionally filmed.

`play_games` is the reusable core, used by `python -m experiments.evaluate` and meant to be called
by the training loop every K updates. It plays in this process with one `Game` (no worker pool),
and touches no random stream of the trainer: actions are drawn from its own generators, seeded
by `seed`, so calling it between updates leaves a run's exact resume intact.

The score is the full game's unclipped score exactly as `game.atari` reports it (`EpisodeStats`);
the evaluation game is built with `clip_rewards=False`, so the rewards `Game.step` returns add up
to that score (a test checks it).

Video: the emulator's RGB screen (native 160×210), scaled ×3 with nearest-neighbour, one frame
per agent step at 60/frame_skip fps (real time), with a strip below showing score, lives and step.
`Game` exposes only grayscale observations, so `RecordingGame` captures the screen after each
action repeat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from game.atari import EpisodeStats, Game, GameSpec, StepResult
from ppo.checkpoint import check_fits, saved_n_actions
from ppo.model import ActorCritic, sample_actions

VIDEO_SCALE = 3
VIDEO_FOURCC = "mp4v"
EMULATOR_HZ = 60
_STRIP_HEIGHT = 30  # pixels of text strip under the scaled screen

# Greedy (argmax) evaluation takes a uniformly random action with this probability. Without
# sticky actions the ALE is deterministic, so a pure argmax policy can lock into a loop (the
# paddle parked while the ball bounces in a cycle that never scores) and N greedy games that draw
# the same no-op count are identical. A little ε breaks both; the Atari literature evaluates
# with ε between 0.001 (Rainbow and later) and 0.05 (Mnih et al. 2015). 0.01 barely moves
# Breakout scores. Sampled play is already stochastic and uses ε = 0 by default.
DEFAULT_GREEDY_EPSILON = 0.01


def evaluation_spec(config: dict[str, Any], seed: int) -> GameSpec:
    """The `GameSpec` of a run's own game settings (checkpoint["config"]), for whole-game scoring.

    Every `GameSpec` field that the config names is taken from it (game, frame skip and stack,
    no-ops, FIRE, the frame cap), so the policy sees exactly the observations it was trained on.
    Rewards are left unclipped (they then add up to the score); `terminal_on_life_loss` only
    affects the learner's signal, never how long a game lasts.
    """
    missing = sorted({"game", "frame_stack"} - set(config))
    if missing:
        raise ValueError(f"the run's config has no {missing[0]!r}")
    return GameSpec.from_settings(config, seed, clip_rewards=False)


def screen_rgb(game: Game) -> np.ndarray:
    """The emulator's current RGB screen, (210, 160, 3) uint8."""
    return game.screen_rgb()


class RecordingGame(Game):
    """A `Game` that also keeps the RGB screen after each action repeat, while `recording` is on.

    `Game.step` may repeat twice (the action, then FIRE after a lost life): both frames are kept.
    Frames from a `reset` (the one `Game.step` does by itself at game over) are not: they belong
    to the next game, whose first frame the caller grabs with `screen_rgb` when it starts.
    """

    recording = False  # class defaults: `Game.__init__` already repeats (through reset)
    _in_reset = False

    def __init__(self, spec: GameSpec) -> None:
        self.frames: list[np.ndarray] = []
        super().__init__(spec)

    def _repeat(self, ale_action: Any) -> float:
        reward = super()._repeat(ale_action)
        if self.recording and not self._in_reset:
            self.frames.append(screen_rgb(self).copy())
        return reward

    def reset(self) -> np.ndarray:
        self._in_reset = True
        try:
            return super().reset()
        finally:
            self._in_reset = False

    def take_frames(self) -> list[np.ndarray]:
        frames, self.frames = self.frames, []
        return frames


class VideoRecorder:
    """RGB emulator frames → an MP4 (OpenCV, 'mp4v'), scaled up, with a text strip.

    Writes to a hidden temporary file beside `path` and renames it into place on `close()`, so
    an interrupted or failed evaluation leaves no half-written video at `path`.
    """

    def __init__(self, path: Path, fps: float, scale: int = VIDEO_SCALE, screen: tuple[int, int] = (210, 160)) -> None:
        self.path = Path(path)
        self.scale = scale
        height, width = screen
        self.size = (width * scale, height * scale + _STRIP_HEIGHT)  # (width, height) as OpenCV wants
        self._temp = self.path.with_name(f".{self.path.stem}.partial{self.path.suffix or '.mp4'}")
        self._writer = cv2.VideoWriter(str(self._temp), cv2.VideoWriter_fourcc(*VIDEO_FOURCC), fps, self.size)
        if not self._writer.isOpened():
            self._writer.release()
            self._remove_temp()
            raise OSError(f"OpenCV cannot write an {VIDEO_FOURCC} video at {self.path}")
        self._canvas = np.zeros((self.size[1], self.size[0], 3), np.uint8)
        self.frames = 0
        self._done = False

    def write(self, rgb: np.ndarray, text: str = "") -> None:
        canvas = self._canvas
        screen_h = canvas.shape[0] - _STRIP_HEIGHT
        scaled = cv2.resize(rgb, (canvas.shape[1], screen_h), interpolation=cv2.INTER_NEAREST)
        cv2.cvtColor(scaled, cv2.COLOR_RGB2BGR, dst=canvas[:screen_h])
        canvas[screen_h:] = 0
        if text:
            cv2.putText(canvas, text, (8, canvas.shape[0] - 10), cv2.FONT_HERSHEY_SIMPLEX, 0.55,
                        (255, 255, 255), 1, cv2.LINE_AA)
        self._writer.write(canvas)
        self.frames += 1

    def close(self) -> None:
        """Finish the file and move it to `path`."""
        if self._done:
            return
        self._done = True
        self._writer.release()
        os.replace(self._temp, self.path)

    def abort(self) -> None:
        """Drop the video: nothing is left at `path` (nor the temporary file)."""
        if self._done:
            return
        self._done = True
        self._writer.release()
        self._remove_temp()

    def _remove_temp(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._temp)


StepCallback = Callable[[int, int, StepResult], None]  # (game index, action, step result)


@torch.inference_mode()
def play_games(
    model: ActorCritic,
    spec: GameSpec,
    games: int,
    device: torch.device | str = "cpu",
    greedy: bool = False,
    epsilon: float = 0.0,
    seed: int = 0,
    video_path: Path | None = None,
    max_steps: int | None = None,
    on_step: StepCallback | None = None,
    on_game: Callable[[int, EpisodeStats], None] | None = None,
    cpu_threads: int | None = 1,
) -> list[EpisodeStats]:
    """Play `games` whole games (all lives) with `model`; one `EpisodeStats` per game, in order.

    Actions: argmax of the logits when `greedy`, else a sample from softmax(logits); either way
    replaced by a uniformly random action with probability `epsilon`. `seed` seeds the game (its
    no-op draws) and both action streams, so a call is reproducible on one device. The game ends
    when `game.atari` reports it (game over, or `spec.max_episode_frames` → `truncated=True`) or
    after `max_steps` agent steps (then `truncated=True` too, score so far).
    `video_path`: the first game is filmed there (see the module doc). `on_step` sees every step,
    `on_game` every finished game (index, stats) as soon as it ends.
    The model is used as is (its mode is restored after); it is not modified.
    `cpu_threads`: torch's thread count while playing on CPU, restored after (None: leave it).
    One observation at a time is too little work to split: on a busy 2-core machine 1 thread
    played a game ~8× faster than 2.
    """
    if games < 1:
        raise ValueError(f"games must be ≥ 1, got {games}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be ≥ 1 or None, got {max_steps}")
    device = torch.device(device)
    spec = dataclasses.replace(spec, clip_rewards=False, seed=seed)
    game = RecordingGame(spec)
    if game.n_actions != model.n_actions:
        game.close()
        raise ValueError(f"the model has {model.n_actions} actions, {spec.game} has {game.n_actions}")
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    rng = np.random.default_rng(seed)
    recorder = None
    was_training = model.training
    model.eval()
    threads = torch.get_num_threads()
    if cpu_threads is not None and device.type == "cpu":
        torch.set_num_threads(cpu_threads)
    results: list[EpisodeStats] = []
    try:
        if video_path is not None:
            first = screen_rgb(game)
            recorder = VideoRecorder(Path(video_path), EMULATOR_HZ / spec.frame_skip, screen=first.shape[:2])
            game.recording = True
            recorder.write(first, _caption(0, 0.0, game.lives, spec.game))
        for index in range(games):
            score, length, episode = 0.0, 0, None
            while episode is None:
                observation = torch.from_numpy(game.observation).to(device).unsqueeze(0)
                lives_before = game.lives
                logits, _ = model(observation)
                if epsilon > 0.0 and rng.random() < epsilon:
                    action = int(rng.integers(game.n_actions))
                elif greedy:
                    action = int(torch.argmax(logits, dim=-1).item())
                else:
                    action = int(sample_actions(logits, generator).item())
                result = game.step(action)
                score += result.reward  # unclipped: clip_rewards=False above
                length += 1
                if on_step is not None:
                    on_step(index, action, result)
                if recorder is not None and game.recording:
                    # At a game's end `Game.step` has already reset (lives refilled): show the old game's.
                    lives = game.lives if result.episode is None else (lives_before if result.episode.truncated else 0)
                    for frame in game.take_frames():
                        recorder.write(frame, _caption(length, score, lives, spec.game))
                episode = result.episode
                if episode is None and max_steps is not None and length >= max_steps:
                    episode = EpisodeStats(score, length, True)
                    game.reset()  # the next game starts fresh, as it would after a game over
            results.append(episode)
            if on_game is not None:
                on_game(index, episode)
            if recorder is not None and game.recording:
                game.recording = False  # only the first game is filmed
                game.take_frames()
                recorder.close()
        return results
    except BaseException:
        if recorder is not None:
            recorder.abort()
        raise
    finally:
        game.close()
        model.train(was_training)
        torch.set_num_threads(threads)


def _caption(step: int, score: float, lives: int, name: str) -> str:
    return f"{name}  score {score:g}  lives {lives}  step {step}"


TRAINING_VIDEO_MAX_STEPS = 10_000  # ≈ 11 minutes of video at 15 fps; a good Breakout game is 2–4k steps


def record_training_video(
    model: ActorCritic, config: dict[str, Any], run_dir: Path, update: int, device: torch.device | str,
    max_steps: int | None = TRAINING_VIDEO_MAX_STEPS,
) -> dict[str, float]:
    """The training loop's hook: film one game to `run_dir/videos/update_NNNNNN.mp4`.

    Sampled actions (the policy being trained), seeded by `update`, so each video starts from
    its own no-op draw yet is reproducible. Touches none of the trainer's random streams or
    envs, so exact resume is unaffected. Returns metrics to log: eval_score, eval_length.
    """
    video = Path(run_dir) / "videos" / f"update_{update:06d}.mp4"
    video.parent.mkdir(parents=True, exist_ok=True)
    [game] = play_games(model, evaluation_spec(config, update), 1, device, greedy=False, seed=update,
                        video_path=video, max_steps=max_steps)
    return {"eval_score": game.score, "eval_length": float(game.length)}


def summarize(scores: list[float]) -> dict[str, float]:
    """mean, std (population: ddof=0, defined for one game), min and max of full-game scores."""
    values = np.asarray(scores, dtype=np.float64)
    return {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
            "max": float(values.max())}


def model_from_checkpoint(checkpoint: dict[str, Any], device: torch.device | str = "cpu") -> ActorCritic:
    """The actor-critic of a checkpoint written by `Trainer.state_dict`, on `device`, in eval mode.

    Built from the checkpoint's own action count and frame stack; `CheckpointError` when its
    weights do not fit them (a hand-edited or foreign file), `KeyError` when it lacks the config."""
    n_actions, frame_stack = saved_n_actions(checkpoint), int(checkpoint["config"]["frame_stack"])
    model = ActorCritic(n_actions, frame_stack)
    check_fits(checkpoint, n_actions, frame_stack, into=model)
    return model.to(torch.device(device)).eval()


__all__ = ["DEFAULT_GREEDY_EPSILON", "RecordingGame", "VideoRecorder", "evaluation_spec", "model_from_checkpoint",
           "play_games", "record_training_video", "screen_rgb", "summarize"]
