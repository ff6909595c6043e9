"""What the evaluation tests check of a film: what PyAV reads back from it, and that a browser's
<video> plays it while it loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import av

VIDEO_SIZE = (160 * 3, 210 * 3 + 30)  # (width, height): the screen ×3 plus the text strip


@dataclasses.dataclass
class Film:
    codec: str
    pixel_format: str
    size: tuple[int, int]  # (width, height)
    frames: int  # decoded, not the header's count
    fps: float


def read_film(path: Path) -> Film:
    """What PyAV reads back from a video: the codec and format the browser gets, and every frame."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        context = stream.codec_context
        return Film(context.name, context.pix_fmt, (context.width, context.height), frames,
                    float(stream.average_rate))


def mp4_boxes(path: Path) -> list[str]:
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
    boxes = mp4_boxes(path)
    assert boxes[0] == "ftyp" and boxes.index("moov") < boxes.index("mdat"), boxes
