"""One Atari game with the standard DQN preprocessing, driven through ale-py.

Per agent step the action is repeated `frame_skip` times; the observation is the pixel-wise
max of the last two raw frames (the ALE renders some sprites on alternate frames only),
converted to grayscale and shrunk to 84×84 with `INTER_AREA`, pushed onto a stack of the last
`frame_stack` processed frames. Everything stays uint8.

Two streams leave a game and must not be mixed:
* the **learner's signal**: a reward clipped to its sign, and `terminal=True` when a life is lost
  (so the value of "just lost a ball" is learned to be low) — but the game goes on;
* the **score**: the full game, all lives, unclipped, reported once per game in `EpisodeStats`.
  This is the number published Breakout results quote.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import ale_py
import cv2
import gymnasium as gym
import numpy as np

gym.register_envs(ale_py)
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner per emulator

FRAME_SIZE = 84

# How a ball is launched (when `fire_on_reset`), one agent step per action:
#   "fire":            FIRE after reset and after a lost life (one step);
#   "noop-fire-right": SB3's AtariWrapper and baselines' wrap_deepmind: after a lost life a NOOP step (their
#                      EpisodicLifeEnv's reset), then FIRE, then RIGHT (FireResetEnv presses
#                      actions 1 and 2); after a reset FIRE, RIGHT.
RELAUNCHES = ("fire", "noop-fire-right")


@dataclass(frozen=True)
class GameSpec:
    """Everything needed to build one `Game`; small and picklable, so workers build their own."""

    game: str = "Breakout"  # ALE game name ("Pong") or a full gymnasium id ("ALE/Pong-v5")
    seed: int = 0  # seeds the emulator and the no-op draws
    noop_max: int = 30  # up to this many raw no-op frames after each reset
    fire_on_reset: bool = True  # launch the ball after reset and after each lost life
    relaunch: str = "fire"  # how it is launched: one of RELAUNCHES
    terminal_on_life_loss: bool = True  # learner sees a life loss as an episode end
    reset_stack_on_life_loss: bool = False  # after a lost life the stack restarts from the relaunch frame
    clip_rewards: bool = True  # learner's reward is sign(reward)
    frame_skip: int = 4  # raw frames per agent step
    frame_stack: int = 4  # processed frames per observation
    max_episode_frames: int = 108_000  # truncation: 30 minutes of play at 60 Hz

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], seed: int, **changes: Any) -> GameSpec:
        """The spec named by a run's settings (a config dict: every field is matched by name, so
        the order of fields never matters; absent ones keep their defaults), with `seed`."""
        names = {f.name for f in fields(cls)} - {"seed"}
        return cls(seed=seed, **{**{k: settings[k] for k in names if k in settings}, **changes})


class EpisodeStats(NamedTuple):
    """One finished game: full-game (all lives) unclipped score, length in agent steps."""

    score: float
    length: int
    truncated: bool


class StepResult(NamedTuple):
    reward: float  # what the learner is given (clipped if configured)
    terminal: bool  # end of the learner's episode (life lost or game over)
    truncated: bool  # time limit: bootstrap from `final_observation`, do not treat as terminal
    episode: EpisodeStats | None  # set when a whole game ended at this step
    final_observation: np.ndarray | None  # the truncated state's observation (copy)


# (RGB screen (210, 160, 3) uint8, a fresh array; new_game: the frame a reset ends on, the next game's first)
FrameObserver = Callable[[np.ndarray, bool], None]


def gym_id(game: str) -> str:
    """`Breakout` → `ALE/Breakout-v5`; a full id (containing "/" or "-v") passes unchanged."""
    return game if ("/" in game or "-v" in game) else f"ALE/{game}-v5"


def make_ale_env(game: str, max_episode_frames: int = 108_000) -> gym.Env:
    """The no-frameskip, no-sticky-action variant: the `Game` wrapper owns frame skipping."""
    return gym.make(
        gym_id(game),
        frameskip=1,
        repeat_action_probability=0.0,
        full_action_space=False,
        max_num_frames_per_episode=max_episode_frames,
    )


def is_known_game(game: str) -> bool:
    """True when `game` names an ALE environment gymnasium can build."""
    try:
        spec = gym.spec(gym_id(game))
    except gym.error.Error:
        return False
    return spec.entry_point == "ale_py.env:AtariEnv"


def action_meanings(game: str) -> list[str]:
    """The game's minimal action set by name (`Breakout`: NOOP, FIRE, RIGHT, LEFT)."""
    env = make_ale_env(game)
    try:
        return list(env.unwrapped.get_action_meanings())  # type: ignore[attr-defined]
    finally:
        env.close()


def relaunch_refusal(game: str, relaunch: str, meanings: list[str] | None = None) -> str | None:
    """None when `game` can launch its ball the `relaunch` way; otherwise what is accepted, for a
    one-line refusal (checked before a run starts, and by `Game`). Its actions (`meanings`) are
    read from the emulator only when given none and the relaunch needs more than FIRE."""
    if relaunch not in RELAUNCHES:
        return f"one of {', '.join(RELAUNCHES)}"
    if relaunch == "fire":
        return None
    meanings = action_meanings(game) if meanings is None else meanings
    if "FIRE" in meanings and "RIGHT" not in meanings:
        return f"fire: {game} has no RIGHT action ({', '.join(meanings)})"
    return None


def is_spelled_as_known(game: str) -> bool:
    """True when `game` names an ALE game spelled as the ALE spells it (`Pong`, not `pong`): the
    check of a new run's config, whose command line was spelled so (`configs.cli.spell_game`)."""
    return canonical_game(game) == game


def canonical_game(game: str) -> str | None:
    """`game` spelled as the ALE spells it, whatever its case (`pong` → `Pong`, `ale/pong-v5` →
    `ALE/Pong-v5`), or None when no ALE game has that name. A short name stays short: it is what
    the config, checkpoints and games.csv hold."""
    wanted = gym_id(game).lower()
    for env_id, spec in gym.registry.items():
        if env_id.lower() == wanted and spec.entry_point == "ale_py.env:AtariEnv":
            return env_id if gym_id(game) == game else env_id.removeprefix("ALE/").removesuffix("-v5")
    return None


class Game:
    """One emulator, stepped one agent action at a time.

    `observation` (frame_stack, 84, 84) uint8 is updated in place; pass `observation_out` to have
    it live in a caller's buffer (a shared-memory slot) so no copy is made to publish it.
    The game resets itself at game over or truncation; the learner sees that as a normal step.
    """

    def __init__(self, spec: GameSpec, observation_out: np.ndarray | None = None) -> None:
        self.spec = spec
        self._env = make_ale_env(spec.game, spec.max_episode_frames)
        ale_env: Any = self._env.unwrapped
        self._env.reset(seed=spec.seed)  # seeds the ALE itself
        self._ale = ale_env.ale
        self._actions = list(ale_env._action_set)  # agent index -> ALE action
        meanings = ale_env.get_action_meanings()
        self.action_meanings: list[str] = meanings
        self._noop = self._actions[meanings.index("NOOP")]
        self._launch_after_reset, self._launch_after_life = self._launches(meanings)
        self._rng = np.random.default_rng(spec.seed)

        shape = (spec.frame_stack, FRAME_SIZE, FRAME_SIZE)
        if observation_out is None:
            observation_out = np.zeros(shape, np.uint8)
        if observation_out.shape != shape or observation_out.dtype != np.uint8:
            raise ValueError(f"observation_out must be uint8 {shape}, got {observation_out.dtype} {observation_out.shape}")
        self.observation = observation_out
        height, width = self._ale.getScreenDims()
        self._raw = np.zeros((2, height, width), np.uint8)  # last two raw frames, for the max
        self._lives = 0
        self._score = 0.0
        self._length = 0
        # Sees the RGB screen after every action repeat: a video's frames, which the grayscale
        # observation cannot give. Set it to film; while None the screen is never read.
        self.on_frame: FrameObserver | None = None
        self.reset()

    def _launches(self, meanings: list[str]) -> tuple[list[Any], list[Any]]:
        """The ALE actions pressed after a reset and after a lost life (each one agent step)."""
        refusal = relaunch_refusal(self.spec.game, self.spec.relaunch, meanings if self.spec.fire_on_reset else [])
        if refusal is not None:
            raise ValueError(f"relaunch: {self.spec.relaunch!r}: expected {refusal}")
        if not self.spec.fire_on_reset or "FIRE" not in meanings:
            return [], []
        fire = self._actions[meanings.index("FIRE")]
        if self.spec.relaunch == "fire":
            return [fire], [fire]
        right = self._actions[meanings.index("RIGHT")]
        return [fire, right], [self._noop, fire, right]

    @property
    def n_actions(self) -> int:
        return len(self._actions)

    @property
    def lives(self) -> int:
        return self._ale.lives()

    def screen_rgb(self) -> np.ndarray:
        """The emulator's current RGB screen, (210, 160, 3) uint8: for videos, not what the agent sees."""
        return self._ale.getScreenRGB()

    @property
    def frame_number(self) -> int:
        """Emulator frames since the current game was reset (no-ops included)."""
        return self._ale.getEpisodeFrameNumber()

    def close(self) -> None:
        self._env.close()

    # -- stepping -------------------------------------------------------------------------------

    def _repeat(self, ale_action: Any, new_game: bool = False) -> float:
        """Repeat one action `frame_skip` frames; push max(last two frames) onto the stack."""
        skip = self.spec.frame_skip
        reward = 0.0
        raw = self._raw
        for i in range(skip):
            reward += self._ale.act(ale_action)
            if i >= skip - 2:
                self._ale.getScreenGrayscale(raw[i - skip + 2])
            if self._ale.game_over(with_truncation=False):
                # The game ended mid-repeat: the newest frame is the last one there is.
                self._ale.getScreenGrayscale(raw[1])
                raw[0] = raw[1]
                break
        np.maximum(raw[0], raw[1], out=raw[0])
        stack = self.observation
        stack[:-1] = stack[1:]  # oldest frame first, newest last
        cv2.resize(raw[0], (FRAME_SIZE, FRAME_SIZE), dst=stack[-1], interpolation=cv2.INTER_AREA)
        if self.on_frame is not None:
            self.on_frame(self._ale.getScreenRGB(), new_game)
        return reward

    def reset(self) -> np.ndarray:
        """Start a new game: random no-ops, the launch, and a stack filled with the first frame."""
        self._ale.reset_game()
        if self.spec.noop_max > 0:
            for _ in range(int(self._rng.integers(1, self.spec.noop_max + 1))):
                self._ale.act(self._noop)
                if self._ale.game_over(with_truncation=False):
                    self._ale.reset_game()
        self._score = 0.0
        self._length = 0
        self._lives = self._ale.lives()
        # `step` resets by itself at game over: `new_game` tells an observer this frame opens the next game.
        launch = self._launch_after_reset or [self._noop]  # at least one step: the stack needs a frame
        self._score += self._repeat(launch[0], new_game=True)
        for action in launch[1:]:
            self._score += self._repeat(action)
        self.observation[:-1] = self.observation[-1]
        self._lives = self._ale.lives()
        return self.observation

    def step(self, action: int) -> StepResult:
        raw_reward = self._repeat(self._actions[action])
        self._score += raw_reward
        self._length += 1
        game_over = self._ale.game_over(with_truncation=False)
        lives = self._ale.lives()
        life_lost = lives < self._lives
        self._lives = lives
        if life_lost and not game_over:
            # Relaunch the ball; its reward (none in Breakout) still counts towards the score.
            for ale_action in self._launch_after_life:
                extra = self._repeat(ale_action)
                self._score += extra
                raw_reward += extra
                game_over = self._ale.game_over(with_truncation=False)
                if game_over:
                    break
            self._lives = self._ale.lives()
        if life_lost and not game_over and self.spec.reset_stack_on_life_loss:
            # The learner's episode ended: its next one must not see the last life's frames.
            self.observation[:-1] = self.observation[-1]
        truncated = not game_over and self._ale.getEpisodeFrameNumber() >= self.spec.max_episode_frames
        terminal = game_over or (life_lost and self.spec.terminal_on_life_loss)
        reward = float(np.sign(raw_reward)) if self.spec.clip_rewards else raw_reward

        episode = None
        final_observation = None
        if game_over or truncated:
            episode = EpisodeStats(self._score, self._length, truncated)
            if truncated:
                final_observation = self.observation.copy()
            self.reset()
        return StepResult(reward, terminal, truncated, episode, final_observation)

    # -- exact resume ---------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Everything that decides this game's future: emulator, stack, counters, no-op RNG.

        Only plain values (bytes, numbers, strings, dicts): checkpoints hold these states, and a
        checkpoint is loaded as data (`torch.load(weights_only=True)`), never by unpickling objects.
        """
        return {
            "ale": self._ale.cloneState(include_rng=True).serialize(),
            "observation": self.observation.tobytes(),
            "lives": self._lives,
            "score": self._score,
            "length": self._length,
            "rng": self._rng.bit_generator.state,
            "spec": self.spec.to_dict(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state["spec"]["game"] != self.spec.game:
            raise ValueError(f"state is for game {state['spec']['game']!r}, this game is {self.spec.game!r}")
        observation = np.frombuffer(state["observation"], dtype=self.observation.dtype)
        if observation.size != self.observation.size:
            raise ValueError(f"state holds {observation.size} observation bytes; this game's stack has {self.observation.size}")
        self._ale.restoreState(ale_py.ALEState(state["ale"]))
        self.observation[:] = observation.reshape(self.observation.shape)
        self._lives = state["lives"]
        self._score = state["score"]
        self._length = state["length"]
        self._rng.bit_generator.state = state["rng"]
