"""The games one worker holds, and the one place that answers the pool's commands.

Every transport runs a `GameGroup`: a worker process behind a Pipe (`pipe.py`), a Ray actor
(`ray_actors.py`) and the in-process serial pool (`serial.py`). So a step, a reset, an emulator
state are handled by the same code whatever carries the command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from game.atari import EpisodeStats, Game, GameSpec
from game.vector.protocol import Command


class StepEvents(NamedTuple):
    """The rare things a step reports besides rewards and done flags (env indices are global)."""

    finished: list[tuple[int, EpisodeStats]]  # games that ended, with their full-game score
    final_observations: dict[int, np.ndarray]  # the observation a time limit cut short, for bootstrapping


class GroupArrays(NamedTuple):
    """Where a group reads its actions and writes its results: views of the pool's arrays
    (shared memory, or plain memory in the same process) or the group's own (a Ray actor)."""

    observations: np.ndarray  # (k, frame_stack, 84, 84) uint8
    actions: np.ndarray  # (k,) integer
    rewards: np.ndarray  # (k,) float32
    terminals: np.ndarray  # (k,) bool
    truncations: np.ndarray  # (k,) bool

    @staticmethod
    def allocate(k: int, observation_shape: tuple[int, ...]) -> GroupArrays:
        return GroupArrays(np.zeros((k, *observation_shape), np.uint8), np.zeros(k, np.int32), np.zeros(k, np.float32),
                           np.zeros(k, bool), np.zeros(k, bool))


class GameGroup:
    def __init__(self, specs: Sequence[GameSpec], first_env: int, arrays: GroupArrays) -> None:
        self.first_env = first_env
        self.arrays = arrays
        self.games = [Game(spec, arrays.observations[i]) for i, spec in enumerate(specs)]

    def handle(self, command: Command, payload: Any = None) -> Any:
        """Do what `command` asks; the value is the reply (None for most commands)."""
        if command is Command.STEP:
            return self.step()
        if command is Command.RESET:
            for game in self.games:
                game.reset()
            return None
        if command is Command.GET_STATE:
            return [game.get_state() for game in self.games]
        if command is Command.SET_STATE:
            for game, state in zip(self.games, payload, strict=True):
                game.set_state(state)
            return None
        if command is Command.INFO:
            return self.info()
        if command is Command.PING:
            return None
        raise ValueError(f"unknown command {command!r}")

    def step(self) -> StepEvents | None:
        """Step every game with its action; return only the rare events (usually None)."""
        a = self.arrays
        events = None
        for i, game in enumerate(self.games):
            result = game.step(int(a.actions[i]))
            a.rewards[i] = result.reward
            a.terminals[i] = result.terminal
            a.truncations[i] = result.truncated
            if result.episode is not None:
                if events is None:
                    events = StepEvents([], {})
                events.finished.append((self.first_env + i, result.episode))
                if result.final_observation is not None:
                    events.final_observations[self.first_env + i] = result.final_observation
        return events

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "n_actions": self.games[0].n_actions,
            "action_meanings": self.games[0].action_meanings,
            "torch_imported": "torch" in sys.modules,  # workers must stay small: never torch
            "scheduler": os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None,
        }

    def close(self) -> None:
        for game in self.games:
            game.close()
