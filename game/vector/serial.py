"""The in-process transport: every game runs in the caller's process, one command at a time.

No processes, no Pipes, no shared memory: the same `GameGroup`s the workers run, called directly.
It steps the same games to the same observations as the other transports (a contract test checks
it), starts in milliseconds, and shows a failure's traceback where it happened — for fast tests,
debugging with breakpoints, and machines where starting processes is not allowed.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

from game.vector.group import GameGroup, GroupArrays
from game.vector.pool import EnvPool
from game.vector.protocol import Command, RemoteError, WorkerError


class SerialPool(EnvPool):
    """Workers are `GameGroup`s in this process; a command runs when its reply is gathered."""

    def _allocate(self, observation_shape: tuple[int, ...]) -> GroupArrays:
        self._groups: dict[int, GameGroup] = {}
        self._queued: dict[int, tuple[Command, Any]] = {}
        self._arrays = GroupArrays.allocate(len(self.specs), observation_shape)
        return self._arrays

    def worker_pids(self) -> list[int]:
        return [self._groups[w].info()["pid"] for w in range(self.n_workers)]

    def _start(self, worker: int) -> None:
        envs = self.envs_of(worker)
        self._groups[worker] = GameGroup(self.specs[envs], envs.start, GroupArrays(*(a[envs] for a in self._arrays)))
        self._queued[worker] = (Command.INFO, None)

    def _send(self, worker: int, command: Command, payload: Any = None) -> None:
        self._queued[worker] = (command, payload)

    def _gather(self, workers: Sequence[int], timeout_s: float) -> dict[int, Any]:
        values, failures = {}, []
        for w in workers:
            command, payload = self._queued.pop(w)
            try:
                values[w] = self._groups[w].handle(command, payload)
            except Exception as e:  # as a worker process would report it: the others still answer
                failures.append(WorkerError(w, RemoteError(type(e).__name__, str(e), traceback.format_exc())))
        if failures:
            raise failures[0]
        return values

    def _stop(self, workers: Sequence[int], timeout_s: float) -> None:
        for w in workers:
            if (group := self._groups.pop(w, None)) is not None:
                group.close()
            self._queued.pop(w, None)
