"""`Game` on the real Breakout ROM."""

import numpy as np
import pytest

from configs import ppo as configs_ppo
from game.atari import RELAUNCHES, Game, GameSpec, is_known_game

NOOP, FIRE, RIGHT, LEFT = 0, 1, 2, 3


def play_until(game: Game, action: int, stop, max_steps: int = 5000):
    results = []
    for _ in range(max_steps):
        results.append(game.step(action))
        if stop(results[-1]):
            return results
    raise AssertionError("condition not reached")


def test_observation_is_a_uint8_stack_of_84x84_frames() -> None:
    game = Game(GameSpec(seed=1))
    assert game.observation.shape == (4, 84, 84)
    assert game.observation.dtype == np.uint8
    assert game.n_actions == 4 and game.action_meanings == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    # At reset the stack is the first frame repeated; the frame is not blank.
    assert all(np.array_equal(game.observation[0], game.observation[i]) for i in range(4))
    assert game.observation.max() > 0


def test_stack_order_is_oldest_first() -> None:
    game = Game(GameSpec(seed=2))
    for _ in range(5):
        game.step(RIGHT)
    before = game.observation.copy()
    game.step(LEFT)
    np.testing.assert_array_equal(game.observation[:-1], before[1:])
    assert not np.array_equal(game.observation[-1], before[-1])  # the paddle moved


def test_life_loss_is_terminal_without_reset_and_score_is_full_game_unclipped() -> None:
    game = Game(GameSpec(seed=3, clip_rewards=False))
    rng = np.random.default_rng(0)
    rewards, terminals, lives_seen = [], 0, []
    for _ in range(20_000):
        lives = game.lives
        result = game.step(int(rng.integers(4)))
        rewards.append(result.reward)
        if result.episode is not None:
            break
        if result.terminal:
            terminals += 1
            assert game.lives == lives - 1, "a terminal without game over must be a lost life"
            lives_seen.append(game.lives)
    assert result.episode is not None and not result.episode.truncated
    assert terminals == 4 and lives_seen == [4, 3, 2, 1]  # 5 lives: 4 life losses, then game over
    assert result.terminal
    assert result.episode.score == pytest.approx(sum(rewards))  # all lives, unclipped
    assert result.episode.length == len(rewards)
    assert game.lives == 5  # the game reset itself only at game over


def test_learner_rewards_are_clipped_but_score_is_not() -> None:
    # Breakout's upper rows are worth 4 and 7; a clipped reward is always 0 or 1.
    game = Game(GameSpec(seed=4, clip_rewards=True))
    rng = np.random.default_rng(1)
    rewards = []
    while True:
        result = game.step(int(rng.integers(4)))
        rewards.append(result.reward)
        if result.episode is not None:
            break
    assert set(rewards) <= {0.0, 1.0}
    assert result.episode.score >= sum(rewards)


def test_fire_launches_the_ball_after_reset_and_after_each_life() -> None:
    # With FIRE pressed for it, a paddle that never moves loses all 5 balls: the game ends.
    game = Game(GameSpec(seed=5, fire_on_reset=True))
    results = play_until(game, NOOP, lambda r: r.episode is not None)
    assert sum(r.terminal for r in results) == 5
    # Without it, no-ops never launch the ball: nothing is lost in 300 steps.
    idle = Game(GameSpec(seed=5, fire_on_reset=False))
    assert not any(idle.step(NOOP).terminal for _ in range(300))
    assert idle.lives == 5


def test_the_sb3_relaunch_presses_noop_fire_right_after_a_lost_life_and_fire_right_after_reset() -> None:
    # Counted in emulator frames, 4 per agent step. After a reset with no no-ops: FIRE = 4 frames;
    # FIRE, RIGHT = 8. A lost life then costs the losing step's 4 frames plus the relaunch:
    # FIRE = 4 more, NOOP, FIRE, RIGHT = 12 more.
    for relaunch, after_reset, after_life in (("fire", 4, 4), ("noop-fire-right", 8, 12)):
        game = Game(GameSpec(seed=5, noop_max=0, relaunch=relaunch))
        assert game.frame_number == after_reset
        lives = game.lives
        steps = 0
        while game.lives == lives:
            result = game.step(NOOP)
            steps += 1
        assert result.terminal and result.episode is None and game.lives == lives - 1
        assert game.frame_number == after_reset + 4 * steps + after_life, relaunch
    # RIGHT moves the paddle: the two relaunches leave different screens from the same game.
    fire, sb3 = (Game(GameSpec(seed=5, noop_max=0, relaunch=r)) for r in RELAUNCHES)
    assert not np.array_equal(fire.observation[-1], sb3.observation[-1])


def test_a_relaunch_the_game_cannot_press_is_refused_by_name() -> None:
    # Atlantis has FIRE but no RIGHT (NOOP, FIRE, RIGHTFIRE, LEFTFIRE).
    with pytest.raises(ValueError, match=r"relaunch: 'noop-fire-right': expected fire: Atlantis has no RIGHT action \(NOOP, FIRE, RIGHTFIRE, LEFTFIRE\)"):
        Game(GameSpec(game="Atlantis", relaunch="noop-fire-right"))
    assert Game(GameSpec(game="Atlantis", relaunch="noop-fire-right", fire_on_reset=False)).frame_number > 0  # nothing to press: nothing refused
    with pytest.raises(ValueError, match="relaunch: 'sideways': expected one of fire, noop-fire-right"):
        Game(GameSpec(relaunch="sideways"))
    # configs spells the choices too (it imports nothing of ours): the two must agree.
    assert configs_ppo.RELAUNCHES == RELAUNCHES


def test_random_noops_at_reset() -> None:
    frames = set()
    game = Game(GameSpec(seed=6, noop_max=30, frame_skip=4))
    for _ in range(8):
        game.reset()
        frames.add(game.frame_number - 4)  # minus the FIRE step's 4 frames
    assert len(frames) > 1 and min(frames) >= 1 and max(frames) <= 30
    no_noops = Game(GameSpec(seed=6, noop_max=0, frame_skip=4))
    assert no_noops.frame_number == 4


def test_truncation_is_not_termination_and_keeps_the_final_observation() -> None:
    # The ball never launches, so only the time limit can end this game:
    # 200 frames = 4 frames of the reset's first step + 49 agent steps of 4 frames.
    game = Game(GameSpec(seed=7, fire_on_reset=False, noop_max=0, max_episode_frames=200))
    results = play_until(game, NOOP, lambda r: r.truncated, max_steps=100)
    last = results[-1]
    assert len(results) == 49
    assert not last.terminal and last.episode is not None and last.episode.truncated
    assert last.final_observation is not None and last.final_observation.shape == (4, 84, 84)
    assert game.frame_number < 200  # reset after truncation


def test_state_round_trip_replays_exactly() -> None:
    game = Game(GameSpec(seed=8))
    for _ in range(30):
        game.step(FIRE)
    state = game.get_state()
    actions = np.random.default_rng(2).integers(4, size=60)
    first = [(game.step(int(a)), game.observation.copy()) for a in actions]
    game.set_state(state)
    second = [(game.step(int(a)), game.observation.copy()) for a in actions]
    for (r1, o1), (r2, o2) in zip(first, second, strict=True):
        assert r1.reward == r2.reward and r1.terminal == r2.terminal
        np.testing.assert_array_equal(o1, o2)


def test_same_seed_same_game() -> None:
    a, b = Game(GameSpec(seed=9)), Game(GameSpec(seed=9))
    for action in np.random.default_rng(3).integers(4, size=100):
        a.step(int(action))
        b.step(int(action))
    np.testing.assert_array_equal(a.observation, b.observation)


def test_known_games() -> None:
    assert is_known_game("Breakout") and is_known_game("ALE/Pong-v5")
    assert not is_known_game("NoSuchGame")
