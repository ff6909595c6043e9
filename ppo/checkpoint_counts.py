"""How far a checkpoint file's run got (its update, agent steps and config), read without torch:
loading torch takes seconds, and a resume's refusal that needs only these three answers before it
does (experiments/run/plan.py). Never the checkpoint's reading: `ppo.checkpoint.load_checkpoint`
and `ppo.resume_point.read_resume_point` check everything it holds, and say what is wrong with it.

A checkpoint is torch's zip archive (`torch.save`): one pickle, `<name>/data.pkl`, holds every
value but the tensors' bytes, which lie in entries of their own. Only that pickle is read, by an
unpickler that builds plain values and nothing else: every class it names (a tensor's rebuild, a
storage, an OrderedDict) becomes an inert placeholder, never looked up, so a crafted file runs
nothing. Anything unexpected (not such an archive, a directory or a pickle over its cap, fields
missing or of another kind) is no answer: None."""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeGuard

# torch writes an archive's directory of one entry a tensor (a few KB) and its pickle with the
# tensors apart (its bulk: the games' emulator states, some 50 KB a game): far below these.
MAX_DIRECTORY = 1 << 20
MAX_PICKLE = 64 << 20
# The end of a zip, as zipfile reads it: torch's zip64 end record (56 bytes) and its locator (20),
# then the end record, with no comment (torch writes none). Read first, so a crafted directory is
# refused by its declared size before zipfile builds an entry of it.
ZIP64_END, ZIP64_LOCATOR, END = struct.Struct("<4sQHHIIQQQQ"), b"PK\x06\x07", struct.Struct("<4sHHHHIIH")


@dataclass(frozen=True)
class Counts:
    update: int  # updates completed
    env_steps: int  # agent steps taken, over all envs
    config: dict[str, Any]  # the run's PPOConfig.to_dict(), as the file holds it (unchecked)


class _Inert(dict[Any, Any]):
    """What every class a checkpoint's pickle names becomes: it takes any arguments and state and
    keeps nothing but items set on it (an OrderedDict's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __setstate__(self, state: Any) -> None:
        pass


class _PlainValues(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _Inert

    def persistent_load(self, pid: Any) -> Any:
        return _Inert()


def read_counts(file: BinaryIO) -> Counts | None:
    """The counts of the checkpoint open in `file` (binary, seekable; opened by the caller, as a
    file of a run folder is: without following a link), or None where they cannot be told."""
    try:
        size = file.seek(0, os.SEEK_END)
        if size < ZIP64_END.size + 20 + END.size:
            return None
        file.seek(size - ZIP64_END.size - 20 - END.size)
        tail = file.read()
        signature, *_, directory, _, comment = END.unpack(tail[-END.size:])
        if tail[ZIP64_END.size:].startswith(ZIP64_LOCATOR):  # zipfile then takes the directory's size from here
            signature64, *_, directory, _ = ZIP64_END.unpack(tail[:ZIP64_END.size])
            if signature64 != b"PK\x06\x06":
                return None
        if signature != b"PK\x05\x06" or comment or directory > MAX_DIRECTORY:
            return None
        with zipfile.ZipFile(file) as archive:
            pickles = [info for info in archive.infolist() if info.filename.count("/") == 1 and info.filename.endswith("/data.pkl")]
            if len(pickles) != 1 or pickles[0].compress_type != zipfile.ZIP_STORED \
                    or max(pickles[0].file_size, pickles[0].compress_size) > MAX_PICKLE:
                return None
            state = _PlainValues(io.BytesIO(archive.read(pickles[0]))).load()
    except Exception:  # whatever a crafted or broken file raises: no answer; the full read says what is wrong
        return None
    if type(state) is not dict:
        return None
    update, env_steps, config = state.get("update"), state.get("env_steps"), state.get("config")
    if not (_count(update) and _count(env_steps) and type(config) is dict):
        return None
    return Counts(update, env_steps, config)


def _count(value: Any) -> TypeGuard[int]:
    return type(value) is int and value >= 0
