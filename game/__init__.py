"""Atari games as the learner sees them (`atari`), and the pools of workers that run them (`vector`).

Nothing in this package imports torch or anything of the learner: worker processes stay small
and fork fast.
"""

from game.atari import EpisodeStats, Game, GameSpec, StepResult, make_ale_env

__all__ = ["EpisodeStats", "Game", "GameSpec", "StepResult", "make_ale_env"]
