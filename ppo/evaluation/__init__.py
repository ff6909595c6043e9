"""Watch and score a trained policy: whole games (all lives), played in-process, optionally filmed.

`play` plays (a policy in, scores out), `film` films (the emulator's screen into an MP4), `load`
loads (a model from a checkpoint). The names callers use are re-exported here, but for `film`'s:
importing it loads PyAV and FFmpeg's libraries (about 20 MB), which only a filmed game needs, so a
training run that films nothing never loads them (`play_games` imports it when asked to film).
"""

from ppo.evaluation.load import model_from_checkpoint
from ppo.evaluation.play import (
    DEFAULT_GREEDY_EPSILON,
    Policy,
    evaluation_spec,
    model_policy,
    play,
    play_games,
    record_training_video,
    summarize,
)

__all__ = ["DEFAULT_GREEDY_EPSILON", "Policy", "evaluation_spec", "model_from_checkpoint", "model_policy", "play",
           "play_games", "record_training_video", "summarize"]
