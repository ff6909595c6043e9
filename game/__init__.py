"""Atari games as the learner sees them, and the worker processes that run them.

Nothing in this package imports torch: worker processes stay small and fork fast.
"""

from game.atari import EpisodeStats, Game, GameSpec, StepResult, make_ale_env
from game.pool import EnvPool, PipePool, StepBatch, WorkerDied, WorkerError, WorkerTimeout

__all__ = [
    "EnvPool",
    "EpisodeStats",
    "Game",
    "GameSpec",
    "PipePool",
    "StepBatch",
    "StepResult",
    "WorkerDied",
    "WorkerError",
    "WorkerTimeout",
    "make_ale_env",
]
