"""The saved games of a checkpoint, checked before any worker takes them.

A checkpoint is data from a file (a shared data dir, a download): its emulator states may be
anything. Handed to the workers as they are, a state the emulator cannot read makes every worker
fail, then be replaced, then fail again, until the run stops with a traceback; some byte strings
even hang the emulator's decoder. `states_problem` says what is wrong in one line first: the
shape of each state here, then each state restored (and one frame played) in a throwaway process
of its own, so that a state that hangs or crashes the emulator costs that process, never the run.
Run as `python -m game.states`, this module is that process.
"""

from __future__ import annotations

import math
import numbers
import pickle
import resource
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from game.atari import FRAME_SIZE, Game, GameSpec

MAX_STATE_BYTES = 1 << 20  # an emulator's state is about 15 kB; room for any game, not for a flood
RESTORE_TIMEOUT_S = 120.0  # restoring a run's states takes about a second
MEMORY_LIMIT = 4 << 30  # the throwaway process's address space: a crafted length must not fill the machine
KEYS = {"ale": bytes, "observation": bytes, "lives": int, "score": numbers.Real, "length": int, "rng": dict, "spec": dict}


def shape_problem(state: object, game: str, frame_stack: int) -> str | None:
    """What is wrong with one saved game's shape (the text after "is"), or None."""
    if not isinstance(state, dict) or set(state) != set(KEYS):
        return f"not a game state (expected a dict of {', '.join(KEYS)})"
    for key, kind in KEYS.items():
        value = state[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"not a game state ({key} is a {type(value).__name__}, expected {kind.__name__})"
    if isinstance(state["score"], float) and not math.isfinite(state["score"]):
        return "not a game state (its score is not finite)"
    if not 0 < len(state["ale"]) <= MAX_STATE_BYTES:
        return f"not an emulator state ({len(state['ale']):,} bytes, expected 1 to {MAX_STATE_BYTES:,})"
    if len(state["observation"]) != frame_stack * FRAME_SIZE * FRAME_SIZE:
        return f"not a game state ({len(state['observation']):,} observation bytes, expected {frame_stack * FRAME_SIZE ** 2:,})"
    if state["spec"].get("game") != game:
        return f"a state of another game, not of {game}"
    return None


def states_problem(settings: Mapping[str, Any], states: object, count: int) -> str | None:
    """What is wrong with a checkpoint's `env_states` for a run of `settings` (a config dict) with
    `count` games, as one line starting "env_states", or None when every state restores."""
    if not isinstance(states, list) or len(states) != count:
        return f"env_states is not a list of the run's {count} game states"
    game, frame_stack = settings.get("game"), settings.get("frame_stack")
    for i, state in enumerate(states):
        if (problem := shape_problem(state, str(game), int(frame_stack or 0))) is not None:
            return f"env_states[{i}] is {problem}"
    try:
        child = subprocess.run([sys.executable, "-m", "game.states"], input=pickle.dumps((dict(settings), states)),
                               capture_output=True, timeout=RESTORE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"env_states could not be restored in {RESTORE_TIMEOUT_S:g} s (a state that hangs the emulator)"
    if child.returncode == 0:
        return None
    lines = child.stdout.decode(errors="replace").strip().splitlines()
    if child.returncode == 1 and lines:
        return lines[-1]
    return f"env_states could not be restored: the emulator's process ended with {child.returncode}"


def _restore_each() -> int:
    """The throwaway process: restore each state sent on stdin into one emulator, play a frame."""
    settings, states = pickle.load(sys.stdin.buffer)  # from our own parent: plain values it loaded as data
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    game = Game(GameSpec.from_settings(settings, seed=0))
    try:
        for i, state in enumerate(states):
            try:
                game.set_state(state)
                game.step(0)
            except Exception as e:  # whatever the emulator or numpy raise for bytes that are not a state
                reason = " ".join(str(e).split())[:120] or type(e).__name__
                print(f"env_states[{i}] cannot be restored by the emulator ({type(e).__name__}: {reason})", flush=True)
                return 1
    finally:
        game.close()
    return 0


if __name__ == "__main__":
    sys.exit(_restore_each())
