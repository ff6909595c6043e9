"""Named numpy arrays laid out in one shared-memory block.

The trainer creates the block; each worker attaches by name and writes its games' observations,
rewards and done flags in place. Nothing big is pickled per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

_ALIGN = 64  # cache-line aligned slots, so workers writing neighbouring arrays do not share lines


@dataclass(frozen=True)
class ArraySpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Layout:
    arrays: tuple[ArraySpec, ...]
    nbytes: int

    @staticmethod
    def of(**arrays: tuple[tuple[int, ...], str]) -> Layout:
        specs = []
        offset = 0
        for name, (shape, dtype) in arrays.items():
            spec = ArraySpec(name, tuple(shape), np.dtype(dtype).str, offset)
            specs.append(spec)
            offset += -(-spec.nbytes // _ALIGN) * _ALIGN
        return Layout(tuple(specs), max(offset, 1))

    def views(self, buffer: memoryview) -> dict[str, np.ndarray]:
        return {
            s.name: np.ndarray(s.shape, np.dtype(s.dtype), buffer=buffer, offset=s.offset) for s in self.arrays
        }


class SharedArrays:
    """Owner (`create`) or user (`attach`) of one block; `close` is safe to call twice."""

    def __init__(self, layout: Layout, name: str | None = None) -> None:
        self.layout = layout
        self.is_owner = name is None
        if name is None:
            self._shm = shared_memory.SharedMemory(create=True, size=layout.nbytes)
        else:
            # Workers share the creator's resource tracker (multiprocessing hands them its fd), so
            # attaching only repeats the creator's registration: the block is unlinked once, by
            # the creator's close(), or by the tracker if the creator is killed.
            self._shm = shared_memory.SharedMemory(name=name)
        self.name = self._shm.name
        assert self._shm.buf is not None  # None only after close()
        self.arrays = layout.views(self._shm.buf)
        self._closed = False

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.arrays = {}  # views must go before the buffer can be released
        try:
            self._shm.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes when the process does
        if self.is_owner:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
