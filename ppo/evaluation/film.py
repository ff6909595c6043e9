"""Film a game: the emulator's RGB screen, as `Game.on_frame` reports it, into an H.264 MP4.

The screen (native 160×210) is scaled ×3 with nearest-neighbour, one frame per action repeat at
60/frame_skip fps (real time), with a strip above showing score, lives and step. The agent sees
grayscale 84×84 only; the colour screen is read just while a film is attached. The file is
H.264 (yuv420p, index first) so that browsers play it: the dashboard shows a run's latest video.
"""

from __future__ import annotations

import contextlib
import os
from fractions import Fraction
from pathlib import Path
from typing import Final

import av
import cv2
import numpy as np

from game.atari import Game, StepResult

VIDEO_SCALE = 3
# H.264 in MP4 is what every browser's <video> plays; OpenCV's 'mp4v' (MPEG-4 Part 2) is not
# (Chromium: MediaError 4, "format not supported"). PyAV's wheels ship FFmpeg with libx264.
VIDEO_CODEC: Final = "libx264"  # Final: a literal, so type checkers know it makes a video stream
# Browsers decode H.264 with 4:2:0 chroma only (not the High 4:4:4 profile that keeps RGB's full
# colour), and 4:2:0 needs an even width and height.
VIDEO_PIXEL_FORMAT = "yuv420p"
# The MP4 index (moov atom) is written first, so a browser can start playing while loading.
CONTAINER_OPTIONS = {"movflags": "+faststart"}
# Flat Atari colours and a sharp text strip compress well; "veryfast" keeps the encoder from
# competing with training for the CPU (a game of a few thousand frames encodes in seconds).
ENCODER_OPTIONS = {"preset": "veryfast", "crf": "23"}
EMULATOR_HZ = 60
# Pixels of text strip above the scaled screen: a browser's player draws its controls over the
# bottom of the picture, where a strip under the screen would be hidden while they show.
_STRIP_HEIGHT = 30


def _even(n: int) -> int:
    return n + n % 2


def _create_new(path: Path) -> tuple[int, str]:
    """`path` made anew, never through a link planted there: the name is removed first (a link
    itself, not what it points to; or a film a killed evaluation left), then created with O_EXCL and
    O_NOFOLLOW, so a link put back in between fails the open instead of being followed. Returns the
    open descriptor and the name FFmpeg is to open: /proc/self/fd/N, the very file whatever the name
    `path` holds by then (FFmpeg opens it twice: to write, then to read the index back to the front)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    by_descriptor = f"/proc/self/fd/{fd}"
    return fd, by_descriptor if os.path.exists(by_descriptor) else str(path)


def _open_h264(name: str, fps: float, size: tuple[int, int]) -> tuple[av.container.OutputContainer, av.VideoStream]:
    """An MP4 at `name` with one H.264 stream of `size` (width, height) at `fps`, its file opened."""
    container = av.open(name, mode="w", format="mp4", container_options=CONTAINER_OPTIONS)
    try:
        # A frame's timestamp counts frames: time base 1/fps (60/7 fps stays exact too).
        rate = Fraction(fps).limit_denominator(1001)
        stream = container.add_stream(VIDEO_CODEC, rate=rate, options=ENCODER_OPTIONS)
        stream.width, stream.height = size
        stream.pix_fmt = VIDEO_PIXEL_FORMAT
        stream.codec_context.time_base = 1 / rate
        container.start_encoding()  # opens the file: an unwritable folder fails here, not mid-game
    except BaseException:
        with contextlib.suppress(av.FFmpegError, OSError):
            container.close()
        raise
    return container, stream


class VideoRecorder:
    """RGB emulator frames → an H.264 MP4 (PyAV), scaled up, with a text strip.

    Writes to a hidden temporary file beside `path` and renames it into place on `close()`, so
    an interrupted or failed evaluation leaves no half-written video at `path`.
    """

    def __init__(self, path: Path, fps: float, scale: int = VIDEO_SCALE, screen: tuple[int, int] = (210, 160)) -> None:
        self.path = Path(path)
        self.scale = scale
        height, width = screen
        # (width, height), rounded up to even sizes for 4:2:0: an extra row under the screen and an
        # extra column beside it stay black.
        self.size = (_even(width * scale), _even(height * scale + _STRIP_HEIGHT))
        self._screen_size = (width * scale, height * scale)
        self._temp = self.path.with_name(f".{self.path.stem}.partial{self.path.suffix or '.mp4'}")
        try:
            self._fd, name = _create_new(self._temp)
        except OSError as e:  # a missing or unwritable folder, or a link put back at the temporary name
            raise OSError(f"cannot write an H.264 video at {self.path}: {e.strerror or type(e).__name__}") from e
        try:
            self._container, self._stream = _open_h264(name, fps, self.size)
        except av.FFmpegError as e:
            os.close(self._fd)
            self._remove_temp()
            raise OSError(f"cannot write an H.264 video at {self.path}: {e}") from e
        self._canvas = np.zeros((self.size[1], self.size[0], 3), np.uint8)
        self.frames = 0
        self._done = False

    def write(self, rgb: np.ndarray, text: str = "") -> None:
        canvas = self._canvas
        width, screen_h = self._screen_size
        canvas[:_STRIP_HEIGHT] = 0
        canvas[_STRIP_HEIGHT:_STRIP_HEIGHT + screen_h, :width] = cv2.resize(rgb, (width, screen_h), interpolation=cv2.INTER_NEAREST)
        if text:
            cv2.putText(canvas, text, (8, _STRIP_HEIGHT - 10), cv2.FONT_HERSHEY_SIMPLEX, 0.55,
                        (255, 255, 255), 1, cv2.LINE_AA)
        frame = av.VideoFrame.from_ndarray(canvas, format="rgb24")
        frame.pts = self.frames
        self._container.mux(self._stream.encode(frame))  # the encoder converts to yuv420p
        self.frames += 1

    def close(self) -> None:
        """Finish the file and move it to `path`."""
        if self._done:
            return
        self._done = True
        try:
            self._container.mux(self._stream.encode(None))  # the frames the encoder still holds
            self._container.close()
        except BaseException:
            os.close(self._fd)
            self._remove_temp()
            raise
        os.close(self._fd)
        os.replace(self._temp, self.path)

    def abort(self) -> None:
        """Drop the video: nothing is left at `path` (nor the temporary file)."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(av.FFmpegError, OSError):
            self._container.close()
        os.close(self._fd)
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


__all__ = ["EMULATOR_HZ", "VIDEO_CODEC", "GameFilm", "VideoRecorder"]
