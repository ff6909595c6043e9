"""The learner's record of the games it finished: the run's games.csv rows not yet written, and the
last `score_window` scores and lengths that the reported means are taken over."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class GameRecord(NamedTuple):
    """One finished game, as a row of the run's games.csv."""

    env_step: int  # agent steps taken over all envs when it ended
    update: int  # the update whose rollout it ended in (1-based)
    score: float  # full game, all lives, unclipped
    length: int  # agent steps
    truncated: bool  # ended by the time limit rather than game over


class GameRecords:
    """Every game counted once: `games` over the whole run, the window of the last ones for the
    means, and the rows finished since the caller last took them (`take_finished`)."""

    def __init__(self, window: int) -> None:
        self.games = 0  # full games finished
        self.scores: deque[float] = deque(maxlen=window)  # full-game, unclipped
        self.lengths: deque[int] = deque(maxlen=window)
        self.finished: list[GameRecord] = []  # since the caller last took them

    def add(self, game: GameRecord) -> None:
        self.finished.append(game)
        self.scores.append(game.score)
        self.lengths.append(game.length)
        self.games += 1

    def take_finished(self) -> list[GameRecord]:
        """The games finished since the last call, oldest first (for the run's games.csv)."""
        games, self.finished = self.finished, []
        return games

    def score_mean(self) -> float | None:
        return float(np.mean(self.scores)) if self.scores else None

    def restore(self, games: int, scores: Sequence[float], lengths: Sequence[int], after_update: int | None = None) -> None:
        """The counts and windows as a checkpoint saved them; with `after_update`, the rows not yet
        taken of games that ended later are dropped too (an update abandoned midway)."""
        self.games = games
        self.scores.clear()
        self.scores.extend(scores)
        self.lengths.clear()
        self.lengths.extend(lengths)
        if after_update is not None:
            self.finished = [g for g in self.finished if g.update <= after_update]
