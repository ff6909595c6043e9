"""What the trainer and a worker say to each other over their Pipe.

The Pipe carries only commands and small replies; observations, actions, rewards and done flags
travel through shared memory (`game.vector.shared`). Every request gets exactly one `Reply`, so the
trainer always knows whose turn it is.
"""

from __future__ import annotations

import enum
import pickle
from dataclasses import dataclass
from typing import Any


class Command(enum.Enum):
    STEP = "step"  # actions are in shared memory; step every game once
    RESET = "reset"  # start a new game in every env of the worker
    GET_STATE = "get_state"  # emulator states, for an exact resume
    SET_STATE = "set_state"  # payload: the states GET_STATE returned
    INFO = "info"  # pid, action meanings, and whether torch was imported (it must not be)
    PING = "ping"  # answer at once, doing nothing: a transport's round trip alone (tools/node_crossing.py)
    CLOSE = "close"  # reply, then exit


@dataclass(frozen=True)
class RemoteError:
    """An exception raised inside a worker, carried back with its traceback as text."""

    type_name: str
    message: str
    traceback: str


@dataclass(frozen=True)
class Reply:
    """Either `value` (ok) or `error`: never both."""

    value: Any = None
    error: RemoteError | None = None


# The hot path, once per worker per agent step, sends no pickles: commands without a payload go
# as bytes pickled once, and "done, nothing to report" comes back as an empty message (a pickled
# object is never empty). Everything else is a pickled `(Command, payload)` or `Reply`.
NOTHING_TO_REPORT = b""
_PLAIN_COMMANDS = {command: pickle.dumps((command, None)) for command in Command}
_PLAIN_DECODED = {message: (command, None) for command, message in _PLAIN_COMMANDS.items()}


def encode_command(command: Command, payload: Any = None) -> bytes:
    return _PLAIN_COMMANDS[command] if payload is None else pickle.dumps((command, payload))


def decode_command(message: bytes) -> tuple[Command, Any]:
    plain = _PLAIN_DECODED.get(message)
    return plain if plain is not None else pickle.loads(message)


def decode_reply(message: bytes) -> Reply:
    return Reply() if message == NOTHING_TO_REPORT else pickle.loads(message)


class PoolError(RuntimeError):
    """A worker could not do what it was asked; names the worker."""

    def __init__(self, worker: int, message: str) -> None:
        super().__init__(message)
        self.worker = worker


class WorkerError(PoolError):
    """An exception inside a worker, re-raised in the trainer with the worker's traceback."""

    def __init__(self, worker: int, error: RemoteError) -> None:
        super().__init__(
            worker,
            f"worker {worker} raised {error.type_name}: {error.message}\n"
            f"--- traceback in worker {worker} ---\n{error.traceback.rstrip()}",
        )
        self.remote = error


class WorkerDied(PoolError):
    """A worker process exited without answering (killed, crashed in C code, out of memory);
    `account`: how its transport tells it, where that says more than an exit code (a Ray actor's)."""

    def __init__(self, worker: int, exitcode: int | None, account: str | None = None) -> None:
        super().__init__(worker, account or f"worker {worker} died (exit code {exitcode}) without answering")
        self.exitcode = exitcode


class WorkerTimeout(PoolError):
    """A worker is alive but did not answer within the pool's timeout (hung); `advice`: what the
    transport knows of why (a Ray cluster with too few CPUs for its actors)."""

    def __init__(self, worker: int, timeout_s: float, advice: str | None = None) -> None:
        super().__init__(worker, f"worker {worker} did not answer within {timeout_s:g} s" + (f": {advice}" if advice else ""))
        self.timeout_s = timeout_s


class ClusterLost(RuntimeError):
    """The Ray cluster the workers ran on lost its head, and every worker with it: nothing to
    replace them on, so the run stops (its last checkpoint kept) rather than restarting them."""

    def __init__(self, address: str) -> None:
        super().__init__(f"the Ray cluster at {address} was lost (its head)")
        self.address = address


class WorkerKeepsFailing(RuntimeError):
    """One worker failed more often than the pool's restart policy allows."""
