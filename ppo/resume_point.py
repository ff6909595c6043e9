"""What a run goes on from: a checkpoint's contents checked whole (`read_resume_point`), held as a
`ResumePoint` frozen by its types, and every check of what a checkpoint holds: does its model fit
the game (`check_fits`), can its random states be restored, which of its records (live values,
machines) can be kept. A checkpoint is data from a file: whoever may write the data dir may have
crafted it. Also PBT's exploit, a checkpoint given another member's learner (`with_learner_of`),
checked by the same `check_fits`."""

from __future__ import annotations

import copy
import dataclasses
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from configs.fields import ConfigError
from configs.launch import GROUPING
from configs.ppo import PPOConfig, accepted_live_values
from game.atari import action_meanings, is_known_game, relaunch_refusal
from game.states import states_problem
from ppo.checkpoint import Checkpoint, CheckpointError, load_checkpoint, saved_n_actions
from ppo.model import ActorCritic


@dataclass(frozen=True)
class ResumePoint:
    """A checkpoint checked whole (`read_resume_point`), what a resume goes on from and what an
    evaluation plays. Frozen by its types (`frozen`): read-only mappings, tuples, and tensors of its
    own that torch refuses to change in place, so a consumer cannot change it by mistake."""

    checkpoint: Checkpoint  # its live values, machines and machine choices as far as they can be kept
    config: PPOConfig  # the run's own config, as the checkpoint holds it
    path: Path  # the file it was read from
    notes: tuple[str, ...] = ()  # what was skipped or dropped on the way, to tell the user


def read_resume_point(paths: Sequence[Path]) -> ResumePoint:
    """The one call that checks everything a checkpoint holds: its version and fields, every
    tensor's layout (before any copy), its config, finite parameters of the model of its game's
    actions and frames, its random states and its games' states. `paths`: a run's kept checkpoints,
    newest first, or a single file. A truncated or poisoned newest checkpoint does not lose the run:
    the one before it is used, with a warning naming what was skipped.

    Otherwise `CheckpointError`, whose one line (`refusal_of`) is what `--resume` and `evaluate` both
    print for the same file: the newest one's error when none loads."""
    refused: list[str] = []
    for path in paths:
        if refused and not path.exists():
            continue
        try:
            checkpoint = Checkpoint.from_stored(load_checkpoint(path))
            if not all(bool(torch.isfinite(t).all()) for t in checkpoint.model.values() if t.is_floating_point()):
                raise CheckpointError("the checkpoint holds NaN/inf parameters")
        except CheckpointError as e:
            refused.append(refusal_of(path, e))
            continue
        notes = [f"warning: {refused[0]}; resuming from the one before it, {path.name} (update {checkpoint.update})"] if refused else []
        try:
            try:
                config = PPOConfig.from_dict(checkpoint.config)
                n_envs = config.n_envs
            except (ConfigError, TypeError) as e:
                raise CheckpointError(f"the checkpoint holds a config of another version ({e})") from None
            if not is_known_game(config.game):
                raise CheckpointError(f"the checkpoint's config names {config.game!r}, not an ALE game")
            if config.fire_on_reset and (refusal := relaunch_refusal(config.game, config.relaunch)):  # a resume cannot change it
                raise CheckpointError(f"the checkpoint's config has relaunch {config.relaunch!r}: expected {refusal}")
            check_fits(checkpoint, len(action_meanings(config.game)), config.frame_stack, config.game)
            check_random_states(checkpoint)
            if checkpoint.env_states is not None and (problem := states_problem(checkpoint.config, checkpoint.env_states, n_envs)):
                raise CheckpointError(f"the checkpoint's {problem}; nothing was started")
        except CheckpointError as e:
            raise CheckpointError(refusal_of(path, e)) from None
        checked = dataclasses.replace(checkpoint, live_values=checked_live_values(checkpoint.live_values, notes),
                                      machines=checked_machines(checkpoint.machines, notes),
                                      machine_choices=checked_machine_choices(checkpoint.machine_choices, notes))
        return ResumePoint(Checkpoint(**{f.name: frozen(getattr(checked, f.name)) for f in dataclasses.fields(checked)}),
                           config, path, tuple(notes))
    raise CheckpointError(refused[0])


def refusal_of(path: Path, error: CheckpointError) -> str:
    """The one line that refuses the checkpoint file `path`, shaped as every refusal of bad input is
    (configs/refusals.py): the file, what is accepted, and what is wrong with it."""
    return f"{path}: expected a checkpoint written by python -m experiments.breakout ({error})"


class ReadOnlyDict(dict[str, Any]):
    """A dict that refuses every change: a resume point's mappings. Still a dict, so JSON, numpy's
    generator state and torch's `load_state_dict` read it as one; a copy (`dict(d)`, `d.copy()`) is
    an ordinary dict."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a resume point is read-only: copy what you change (dict(...))")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    # Copied (torch's `load_state_dict` deep-copies what it is given) or pickled, it is a plain dict.
    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(item, memo) for key, item in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


def frozen(value: Any) -> Any:
    """`value` with every mapping a `ReadOnlyDict`, every list a tuple, and every tensor a copy of its
    own made in inference mode, which torch refuses to change in place (an in-place op on it raises)."""
    if torch.is_tensor(value):
        with torch.inference_mode():
            return value.clone()
    if isinstance(value, Mapping):
        return ReadOnlyDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(item) for item in value)
    return value


def thawed(value: Any) -> Any:
    """A `frozen` value as plain dicts, lists and tensors of the caller's own: what a consumer
    changes in place (Adam's moments, which the optimizer steps) or sends to a process that knows
    nothing of ours (the games' states, to the workers)."""
    if torch.is_tensor(value):
        return value.clone()
    if isinstance(value, Mapping):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [thawed(item) for item in value]
    return value


def _fields(checkpoint: Checkpoint | Mapping[str, Any]) -> Mapping[str, Any]:
    """A checkpoint's fields by name, whether a `Checkpoint` or a checkpoint file's dict."""
    return vars(checkpoint) if isinstance(checkpoint, Checkpoint) else checkpoint


def check_fits(checkpoint: Checkpoint | Mapping[str, Any], n_actions: int, frame_stack: int, game: str = "this game",
               into: nn.Module | None = None) -> None:
    """Refuse (`CheckpointError`) a checkpoint whose model is not an `ActorCritic(n_actions, frame_stack)`
    of floating-point parameters (a `Checkpoint`, or a checkpoint file's dict). `game` names whose
    `n_actions` they are, for the message. `into`:
    a model of that shape to load the weights into when they fit; without it a scratch one is built,
    only to check."""
    saved = checkpoint.n_actions if isinstance(checkpoint, Checkpoint) else saved_n_actions(checkpoint)
    checkpoint = _fields(checkpoint)
    if saved != n_actions:
        raise CheckpointError(f"the checkpoint's model has {saved} actions; {game} has {n_actions}")
    stacked = checkpoint["config"].get("frame_stack", frame_stack)
    if stacked != frame_stack:
        raise CheckpointError(f"the checkpoint's model stacks {stacked} frames; this config stacks {frame_stack}")
    scratch = into is None
    if into is None:
        # On the meta device: shapes without storage, so no initial weights are drawn (the
        # orthogonal init's QR took 1.5 s of a refusal's time) and no random stream of the
        # caller (a run about to resume, say) moves.
        with torch.device("meta"):
            into = ActorCritic(n_actions, frame_stack)
    # Shapes and dtypes first, all of them: a tensor is copied only once every one fits.
    expected = into.state_dict()
    for name, value in checkpoint["model"].items():
        if name in expected and torch.is_tensor(value) and not (value.is_floating_point() and value.shape == expected[name].shape):
            raise CheckpointError(f"the checkpoint's model does not fit this config: {name} is a {value.dtype} tensor of shape "
                                  f"{tuple(value.shape)}, expected a floating-point one of shape {tuple(expected[name].shape)}")
    if scratch:  # nothing to load into: the names alone are left to check, as load_state_dict would
        missing, unexpected = sorted(set(expected) - set(checkpoint["model"])), sorted(set(checkpoint["model"]) - set(expected))
        if missing or unexpected:
            raise CheckpointError(f"the checkpoint's model does not fit this config: missing {missing}, unexpected {unexpected}")
        return
    try:
        into.load_state_dict(checkpoint["model"])
    except RuntimeError as e:
        raise CheckpointError(f"the checkpoint's model does not fit this config: {str(e).splitlines()[0]}") from None


# The state of a torch.Generator, by the kind of device it draws on: the CPU's Mersenne Twister
# (5,056 bytes) and CUDA's Philox (a seed and an offset, 16 bytes) share nothing, so neither can
# take the other's. Only these two kinds: `--device` names cpu or cuda.
GENERATOR_STATE_BYTES = {"cpu": torch.Generator().get_state().numel(), "cuda": 16}


def sampled_on(checkpoint: Checkpoint | Mapping[str, Any]) -> str:
    """The kind of device ("cpu" or "cuda") whose generator drew the checkpoint's actions: recorded
    as `sample_generator_device`, or (older checkpoints) told by the size of the state."""
    checkpoint = _fields(checkpoint)
    recorded = checkpoint.get("sample_generator_device")
    if recorded is not None:
        return str(recorded)
    size = checkpoint["sample_generator"].numel()
    return next(kind for kind, n in GENERATOR_STATE_BYTES.items() if n == size)


def check_random_states(checkpoint: Checkpoint | Mapping[str, Any]) -> None:
    """Refuse (`CheckpointError`) a checkpoint whose action-sampling or shuffling state cannot be
    restored, before anything starts: restoring them is the resume's first step after the workers
    start, too late to refuse cleanly. Each state is tried on a scratch generator of its kind."""
    checkpoint = _fields(checkpoint)
    state = checkpoint.get("sample_generator")
    kinds = " or ".join(f"the {n:,} bytes of a {kind.upper()} generator's state" for kind, n in GENERATOR_STATE_BYTES.items())
    if not (torch.is_tensor(state) and state.dtype == torch.uint8 and state.dim() == 1
            and state.numel() in GENERATOR_STATE_BYTES.values()):
        what = f"a {state.dtype} tensor of shape {tuple(state.shape)}" if torch.is_tensor(state) else f"{type(state).__name__} {state!r:.60}"
        raise CheckpointError(f"the checkpoint's sample_generator is {what}; expected {kinds} (uint8)")
    device = sampled_on(checkpoint)
    if GENERATOR_STATE_BYTES.get(device) != state.numel():
        raise CheckpointError(f"the checkpoint's sample_generator_device is {device!r} but its sample_generator "
                              f"holds {state.numel():,} bytes; expected {kinds}")
    if device == "cpu":
        try:
            torch.Generator().set_state(state)
        except RuntimeError as e:
            raise CheckpointError(f"the checkpoint's sample_generator is not a CPU generator's state ({str(e).splitlines()[0]})") from None
    try:
        shuffle = checkpoint.get("shuffle_rng")
        if not isinstance(shuffle, dict):
            raise TypeError(f"a {type(shuffle).__name__}, not a dict")
        np.random.default_rng().bit_generator.state = shuffle
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"the checkpoint's shuffle_rng is not the state of numpy's PCG64 generator ({type(e).__name__}: {e})") from None


def checked_live_values(saved: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """A checkpoint's live values without the ones configs/ppo.py does not allow (each one noted):
    a poisoned value saved by an older version must not poison the resumed run too."""
    kept, refused = accepted_live_values(saved, fallback={})
    for name, problem in refused.items():
        notes.append(f"warning: ignoring the checkpoint's live value {name} = {saved[name]!r}: expected {problem}")
    return kept


UNRECORDED_MACHINE = {"cpu": "unrecorded (trained before runs recorded their machine)"}
MAX_MACHINES = 64
MAX_MACHINE_FIELD = 200  # characters of one value of a record


def checked_machines(saved: Any, notes: list[str]) -> list[dict[str, str]]:
    """A checkpoint's list of the machines that trained it, as plain string-to-string records
    (anything else in it is dropped, and noted). A checkpoint written before runs recorded their
    machines gives one `UNRECORDED_MACHINE`."""
    def is_record(m: Any) -> bool:
        return isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str) and len(v) <= MAX_MACHINE_FIELD
                                           for k, v in m.items())
    if saved is None:
        return [dict(UNRECORDED_MACHINE)]
    if isinstance(saved, list) and len(saved) <= MAX_MACHINES and all(map(is_record, saved)):
        return saved
    notes.append(f"warning: ignoring the checkpoint's machines = {reprlib.repr(saved)}: expected a list of at most "
                 f"{MAX_MACHINES} records of strings (of {MAX_MACHINE_FIELD} characters at most)")
    return [dict(UNRECORDED_MACHINE)]


def checked_machine_choices(saved: Any, notes: list[str]) -> dict[str, str]:
    """A checkpoint's record of the settings its machine chose, as grouping fields with short reasons
    (anything else is dropped, and noted); none where not recorded."""
    if saved is None:
        return {}
    if isinstance(saved, dict) and all(k in GROUPING and isinstance(v, str) and v.isprintable() and len(v) <= MAX_MACHINE_FIELD
                                       for k, v in saved.items()):
        return dict(saved)
    notes.append(f"warning: ignoring the checkpoint's machine_choices = {reprlib.repr(saved)}: expected "
                 f"{', '.join(sorted(GROUPING))} with reasons of {MAX_MACHINE_FIELD} printable characters at most")
    return {}


# What "the learner" is: the network, Adam's state and the schedule position (updates and agent
# steps, which set the annealing). Everything else of a checkpoint is the run's own: its games and
# their records, its seeds and random streams, its live values, its machines and counters.
LEARNER_FIELDS = ("model", "optimizer", "update", "env_steps")


def with_learner_of(own: Checkpoint, donor: Checkpoint) -> Checkpoint:
    """`own` with `donor`'s learner (`LEARNER_FIELDS`) in place of its own: what population-based
    training's exploit copies. The result keeps `own`'s games (emulator states, counts, scores),
    seeds, random streams, live values and config, so the run it resumes plays its own games on.
    `CheckpointError` when the donor's model is not a model of `own`'s shape (actions, frames).
    Neither argument is changed; the result shares their tensors, as `stored` does."""
    frames = own.config.get("frame_stack")
    if not isinstance(frames, int):
        raise CheckpointError(f"the checkpoint's config has frame_stack {frames!r}; expected an integer")
    check_fits(donor, own.n_actions, frames, "the checkpoint it is copied into")
    return dataclasses.replace(own, **{name: getattr(donor, name) for name in LEARNER_FIELDS})


