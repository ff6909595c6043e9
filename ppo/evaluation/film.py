"""Film a game: the emulator's RGB screen, as `Game.on_frame` reports it, into an MP4.

The screen (native 160×210) is scaled ×3 with nearest-neighbour, one frame per action repeat at
60/frame_skip fps (real time), with a strip below showing score, lives and step. The agent sees
grayscale 84×84 only; the colour screen is read just while a film is attached.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import cv2
import numpy as np

from game.atari import Game, StepResult

VIDEO_SCALE = 3
VIDEO_FOURCC = "mp4v"
EMULATOR_HZ = 60
_STRIP_HEIGHT = 30  # pixels of text strip under the scaled screen


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
        self._writer = cv2.VideoWriter(str(self._temp), cv2.VideoWriter.fourcc(*VIDEO_FOURCC), fps, self.size)
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


class GameFilm:
    """Films `game` to `path`, from its screen now until its current game ends, then detaches.

    The game feeds the frames (`Game.on_frame`: every action repeat, so also the FIRE that
    `Game.step` adds after a lost life); the caption of a step's frames is only known once the
    step returns, so the player reports each step and the game's end: `on_step`, `finish`.
    The game must be unclipped (`clip_rewards=False`): the caption's score adds up its rewards.
    """

    def __init__(self, path: Path, game: Game) -> None:
        self._game = game
        first = game.screen_rgb()
        self._recorder = VideoRecorder(Path(path), EMULATOR_HZ / game.spec.frame_skip, screen=first.shape[:2])
        self._pending: list[np.ndarray] = []  # this step's frames, waiting for its caption
        self._score, self._length, self._lives = 0.0, 0, game.lives
        self._recorder.write(first, self._caption())
        game.on_frame = self._frame

    def _frame(self, rgb: np.ndarray, new_game: bool) -> None:
        if new_game:  # the next game's first frame: this film is over
            self._game.on_frame = None
            return
        self._pending.append(rgb)

    def on_step(self, result: StepResult) -> None:
        """After each `Game.step`: caption and write its frames."""
        if not self._pending:  # no frames: the film has ended
            return
        self._score += result.reward
        self._length += 1
        if result.episode is not None:
            # `Game.step` has already reset (lives refilled): show the finished game's lives.
            self._lives = self._lives if result.episode.truncated else 0
        else:
            self._lives = self._game.lives
        for frame in self._pending:
            self._recorder.write(frame, self._caption())
        self._pending.clear()

    def finish(self) -> None:
        """The filmed game is over (the game ended it, or the player cut it short): finish the file."""
        self._game.on_frame = None
        self._recorder.close()

    def abort(self) -> None:
        """Drop the video: nothing is left at `path`."""
        self._game.on_frame = None
        self._recorder.abort()

    def _caption(self) -> str:
        return f"{self._game.spec.game}  score {self._score:g}  lives {self._lives}  step {self._length}"


__all__ = ["EMULATOR_HZ", "GameFilm", "VideoRecorder"]
