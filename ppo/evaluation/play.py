"""Play whole games (all lives) in this process and score them: a policy in, full-game scores out.

`play` is the loop: any `Policy` (one observation → one action) on one `Game`, no worker pool.
`play_games` plays an `ActorCritic` with it (`model_policy`: argmax or sampled, ε-greedy),
optionally filming the first game (`film.GameFilm`); `python -m experiments.evaluate` and the
training loop's `record_training_video` use it. It touches no random stream of the trainer:
actions are drawn from the policy's own generators, seeded by `seed`, so calling it between
updates leaves a run's exact resume intact.

The score is the full game's unclipped score exactly as `game.atari` reports it (`EpisodeStats`);
the game is played with `clip_rewards=False`, so the rewards `Game.step` returns add up to that
score (a test checks it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from configs.fields import DEFAULT_GREEDY_EPSILON  # why 0.01: beside it (evaluate's --help shows it)
from game.atari import EpisodeStats, Game, GameSpec, StepResult
from ppo.model import ActorCritic, sample_actions
from ppo.threads import torch_threads

if TYPE_CHECKING:  # at run time `film` is imported only to film (see ppo/evaluation/__init__.py)
    from ppo.evaluation.film import GameFilm

Policy = Callable[[np.ndarray], int]  # one observation (frame_stack, 84, 84) uint8 → an action index
StepCallback = Callable[[int, int, StepResult], None]  # (game index, action, step result)
GameCallback = Callable[[int, EpisodeStats], None]  # (game index, the finished game)


def evaluation_spec(config: Mapping[str, Any], seed: int) -> GameSpec:
    """The `GameSpec` of a run's own game settings (checkpoint["config"]), for whole-game scoring.

    Every `GameSpec` field that the config names is taken from it (game, frame skip and stack,
    no-ops, FIRE, the frame cap), so the policy sees exactly the observations it was trained on.
    Rewards are left unclipped (they then add up to the score); `terminal_on_life_loss` only
    affects the learner's signal, never how long a game lasts.
    """
    missing = sorted({"game", "frame_stack"} - set(config))
    if missing:
        raise ValueError(f"the run's config has no {missing[0]!r}")
    return GameSpec.from_settings(config, seed, clip_rewards=False)


def model_policy(model: ActorCritic, device: torch.device | str = "cpu", greedy: bool = False, epsilon: float = 0.0,
                 seed: int = 0) -> Policy:
    """`model` as a policy: argmax of the logits when `greedy`, else a sample from softmax(logits);
    either way replaced by a uniformly random action with probability `epsilon`. Its two random
    streams are its own, seeded by `seed`. The model is used in whatever mode it is in."""
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    device = torch.device(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    rng = np.random.default_rng(seed)

    @torch.inference_mode()
    def act(observation: np.ndarray) -> int:
        # The ε draw comes first and the forward pass draws nothing, so skipping the network for
        # a random action leaves both streams where they would be.
        if epsilon > 0.0 and rng.random() < epsilon:
            return int(rng.integers(model.n_actions))
        logits, _ = model(torch.from_numpy(observation).to(device).unsqueeze(0))
        if greedy:
            return int(torch.argmax(logits, dim=-1).item())
        return int(sample_actions(logits, generator).item())

    return act


def play(policy: Policy, game: Game, games: int, max_steps: int | None = None,
         on_step: StepCallback | None = None, on_game: GameCallback | None = None) -> list[EpisodeStats]:
    """Play `games` whole games on `game` (built with `clip_rewards=False`); one `EpisodeStats` each, in order.

    A game ends when `game.atari` reports it (game over, or `spec.max_episode_frames` →
    `truncated=True`) or after `max_steps` agent steps (then `truncated=True` too, score so far).
    `on_step` sees every step, `on_game` every finished game as soon as it ends.
    """
    if games < 1:
        raise ValueError(f"games must be ≥ 1, got {games}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be ≥ 1 or None, got {max_steps}")
    if game.spec.clip_rewards:
        raise ValueError("play scores whole games: build the game with clip_rewards=False")
    results: list[EpisodeStats] = []
    for index in range(games):
        score, length, episode = 0.0, 0, None
        while episode is None:
            action = policy(game.observation)
            result = game.step(action)
            score += result.reward  # unclipped, checked above
            length += 1
            if on_step is not None:
                on_step(index, action, result)
            episode = result.episode
            if episode is None and max_steps is not None and length >= max_steps:
                episode = EpisodeStats(score, length, True)
                game.reset()  # the next game starts fresh, as it would after a game over
        results.append(episode)
        if on_game is not None:
            on_game(index, episode)
    return results


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def play_games(
    model: ActorCritic,
    spec: GameSpec,
    games: int,
    device: torch.device | str = "cpu",
    greedy: bool = False,
    epsilon: float = 0.0,
    seed: int = 0,
    video_path: Path | None = None,
    max_steps: int | None = None,
    on_step: StepCallback | None = None,
    on_game: GameCallback | None = None,
    cpu_threads: int | None = 1,
) -> list[EpisodeStats]:
    """`play` `model` (`model_policy(model, device, greedy, epsilon, seed)`) on `spec`'s game.

    `seed` seeds the game (its no-op draws) and both action streams, so a call is reproducible on
    one device. `video_path`: the first game is filmed there (`film.GameFilm`); nothing is left
    there when playing fails. The model is used in eval mode (its mode restored after), never modified.
    `cpu_threads`: torch's thread count while playing on CPU, restored after (None: leave it).
    One observation at a time is too little work to split: on a busy 2-core machine 1 thread
    played a game ~8× faster than 2.
    """
    device = torch.device(device)
    policy = model_policy(model, device, greedy, epsilon, seed)
    game = Game(dataclasses.replace(spec, clip_rewards=False, seed=seed))
    film: GameFilm | None = None

    def step(index: int, action: int, result: StepResult) -> None:
        if on_step is not None:
            on_step(index, action, result)
        if film is not None and index == 0:  # only the first game is filmed
            film.on_step(result)

    def game_over(index: int, episode: EpisodeStats) -> None:
        if on_game is not None:
            on_game(index, episode)
        if film is not None and index == 0:
            film.finish()

    threads = torch_threads(cpu_threads) if cpu_threads is not None and device.type == "cpu" else contextlib.nullcontext()
    try:
        if game.n_actions != model.n_actions:
            raise ValueError(f"the model has {model.n_actions} actions, {spec.game} has {game.n_actions}")
        if video_path is not None:
            from ppo.evaluation.film import GameFilm
            film = GameFilm(Path(video_path), game)
        with _eval_mode(model), threads:
            return play(policy, game, games, max_steps, step, game_over)
    except BaseException:
        if film is not None:
            film.abort()
        raise
    finally:
        game.close()


TRAINING_VIDEO_MAX_STEPS = 10_000  # ≈ 11 minutes of video at 15 fps; a good Breakout game is 2–4k steps


def record_training_video(
    model: ActorCritic, config: dict[str, Any], run_dir: Path, update: int, device: torch.device | str,
    max_steps: int | None = TRAINING_VIDEO_MAX_STEPS,
) -> dict[str, float]:
    """The training loop's hook: film one game to `run_dir/videos/update_NNNNNN.mp4`.

    Sampled actions (the policy being trained), seeded by `update`, so each video starts from
    its own no-op draw yet is reproducible. Touches none of the trainer's random streams or
    envs, so exact resume is unaffected. Returns metrics to log: eval_score, eval_length.
    """
    video = Path(run_dir) / "videos" / f"update_{update:06d}.mp4"
    video.parent.mkdir(parents=True, exist_ok=True)
    [game] = play_games(model, evaluation_spec(config, update), 1, device, greedy=False, seed=update,
                        video_path=video, max_steps=max_steps)
    return {"eval_score": game.score, "eval_length": float(game.length)}


def summarize(scores: list[float]) -> dict[str, float]:
    """mean, std (population: ddof=0, defined for one game), min and max of full-game scores."""
    values = np.asarray(scores, dtype=np.float64)
    return {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
            "max": float(values.max())}


__all__ = ["DEFAULT_GREEDY_EPSILON", "Policy", "evaluation_spec", "model_policy", "play", "play_games",
           "record_training_video", "summarize"]
