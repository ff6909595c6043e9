"""Watch a trained agent play and score it: `python -m experiments.evaluate --help`.

    python -m experiments.evaluate --run RUN_UUID --games 10 --video evaluate.mp4

Plays whole games (all lives) with the run's policy on the run's own game settings, prints each
game's full-game unclipped score, then `mean ± std`, and films the first game (a bare file name
into the run's folder, where the dashboard shows it). Those lines are for
people and go to stderr; stdout holds one line, a JSON object with the results. Bad input is one
`error:` line and exit code 2, before anything is played or written.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from configs.cli import OneLineParser, finite_number
from configs.fields import DEFAULT_GREEDY_EPSILON, MAX_SEED, MAX_UPDATES, device_name
from configs.ppo import ConfigError
from configs.refusals import bad_value, fail
from experiments.run.console import say, shown

if TYPE_CHECKING:
    import torch

    from game.atari import EpisodeStats
    from ppo.resume_point import ResumePoint

# The learner (torch) and the run folders' readers are imported by the functions that use them,
# once the command line is accepted: --help and a refused option answer without loading torch.

_UUID = re.compile(r"^[0-9a-f]{32}$")
MAX_GAMES = 100_000  # a game takes seconds to minutes: more would not end in a lifetime


def _int(option: str, text: str | None, minimum: int, maximum: int, allow_none: bool = False) -> int | None:
    if text is None or (allow_none and text.strip().lower() in ("none", "null")):
        return None
    accepted = f"an integer from {minimum:_} to {maximum:_}" + (", or none" if allow_none else "")
    try:
        value = int(text)
    except ValueError:
        bad_value(option, repr(text) if not text.strip() else text, accepted)
    if not minimum <= value <= maximum:
        bad_value(option, text, accepted)
    return value


def _epsilon(text: str | None, greedy: bool) -> float:
    if text is None:
        return DEFAULT_GREEDY_EPSILON if greedy else 0.0
    if (value := finite_number(text, 0.0, 1.0)) is None:
        bad_value("--epsilon", text, "a number in [0, 1]")
    return value


def check_device_name(text: str) -> None:
    """`--device` as it is spelt (auto, cpu, cuda, cuda:N), before torch is loaded to find it."""
    if (accepted := device_name(text)) is not None:
        bad_value("--device", text, accepted)


def parse_device(text: str) -> torch.device:
    from ppo.devices import resolve_device

    try:
        return resolve_device(text)
    except ConfigError as e:
        fail(str(e))


def _video_path(text: str | None) -> Path | None:
    """`--video` as given, refused early where it can be: a bare file name goes into the run's
    folder (where the dashboard shows it), found only once the checkpoint is (`film_in_run_folder`);
    a path with a folder goes where it says, checked now."""
    if text is None:
        return None
    path = Path(text)
    if path.suffix.lower() != ".mp4":
        bad_value("--video", text, "a file name ending in .mp4")
    if "/" not in text:
        if text.startswith("."):  # the dashboard shows no hidden file (a film being written is one)
            bad_value("--video", text, f"a file name that does not start with '.' (the dashboard hides those), "
                                       f"or a path with a folder, such as ./{text}")
        return path
    _check_writable(text, path)
    return path


def _check_writable(text: str, path: Path) -> None:
    """A path an MP4 can be written to; checked by creating (and removing) a file beside it."""
    if path.is_dir():
        bad_value("--video", text, "a file path, not a folder")
    parent = path.parent
    if not parent.is_dir():
        bad_value("--video", text, f"a path in an existing folder ({parent} does not exist)")
    if path.exists() and not path.is_file():
        bad_value("--video", text, "a path to a regular file")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        bad_value("--video", text, f"a path in a writable folder ({parent}: {e.strerror or e})")


def run_folder_of(checkpoint_file: Path) -> Path | None:
    """The folder of the run a checkpoint given alone belongs to, `data_dir/<name>/<uuid>/`: the
    nearest folder above it named by the uuid that its place names (as given first, so a relative
    path stays one), or None when it lies in no run's folder."""
    uuid = checkpoint_file.resolve().parent.parent.name  # data_dir/name/<uuid>/checkpoints/
    if not _UUID.match(uuid):
        return None
    for path in (checkpoint_file, checkpoint_file.resolve()):
        for folder in path.parents:
            if folder.name == uuid:
                return folder
    return None


def film_in_run_folder(text: str, video: Path, checkpoint_file: Path, run_dir: Path | None) -> Path:
    """Where `--video TEXT` is written: a bare name into the run's folder `run_dir`, checked there; a
    path with a folder as it is (checked already)."""
    if "/" in text:
        return video
    if run_dir is None:
        bad_value("--video", text, f"a path with a folder, such as ./{text}: a bare name goes into the run's "
                                   f"folder, and {checkpoint_file} lies in no run folder")
    _check_writable(text, run_dir / video)
    return run_dir / video


class Located(NamedTuple):
    path: Path  # the checkpoint file
    option: str  # the option that named it, and its value
    value: str
    run_dir: Path | None  # the folder of its run: --run's own, or the one a --checkpoint given alone lies in

    @property
    def run_uuid(self) -> str | None:
        return self.run_dir.name if self.run_dir is not None else None


def is_a_file(path: Path) -> bool:
    """Whether `path` names a file (False for a name too long for the filesystem, not an OSError)."""
    try:
        return path.is_file()
    except OSError:
        return False


def locate_checkpoint(run: str | None, checkpoint: str | None, data_dir: str) -> Located:
    """The checkpoint named by --run (a run's uuid or its first 8 or more digits) and/or
    --checkpoint, and its run's folder; exits on bad input, before torch is loaded."""
    from experiments.run.folders import RunFolder

    if run is None and checkpoint is None:
        fail("--run: expected the uuid of a trained run (or give --checkpoint PATH)")
    folder = None
    if run is not None:
        try:
            folder = RunFolder.named(Path(data_dir), run, "run")
        except ConfigError as e:
            fail(str(e))
        if folder is None:
            bad_value("--run", run,
                      f"the uuid (32 hex digits) of a run under {data_dir}/ (none found there; see --data-dir)")
    if checkpoint is not None:
        path = Path(checkpoint)
        if folder is not None and not path.resolve().is_relative_to(folder.path.resolve()):
            bad_value("--checkpoint", checkpoint, f"a checkpoint of run {run}, i.e. a file under {folder.path}/ (or drop --run)")
        if not is_a_file(path):
            bad_value("--checkpoint", checkpoint, f"a readable checkpoint written by python -m experiments.breakout (no checkpoint at {path})")
        return Located(path, "--checkpoint", checkpoint, folder.path if folder is not None else run_folder_of(path))
    assert folder is not None and run is not None
    path = folder.newest_checkpoint
    if not path.exists():
        bad_value("--run", run, f"a readable checkpoint written by python -m experiments.breakout (no checkpoint at {path})")
    return Located(path, "--run", run, folder.path)


def read_checked(path: Path) -> ResumePoint:
    """The checkpoint at `path`, checked whole as a resume checks it, and refused in the very line
    a resume of it prints (ppo.resume_point.read_resume_point)."""
    from ppo.checkpoint import CheckpointError
    from ppo.resume_point import read_resume_point

    try:
        return read_resume_point([path])
    except CheckpointError as e:
        fail(str(e))


PROG = "python -m experiments.evaluate"


def build_parser(prog: str = PROG) -> OneLineParser:
    parser = OneLineParser(
        prog=prog,
        description="Play whole games with a trained PPO policy: full-game scores, mean ± std, "
                    "and an MP4 of the first game.",
    )
    parser.add_argument("--run", metavar="RUN_UUID",
                        help="the run to evaluate: its last checkpoint, or the --checkpoint given (then from this run)")
    parser.add_argument("--checkpoint", metavar="PATH", help="a checkpoint file to evaluate (alone, or with --run)")
    parser.add_argument("--data-dir", metavar="DIR", default="runs",
                        help="folder that holds the runs (default: runs)")
    parser.add_argument("--games", metavar="N", default="10", help=f"whole games (all lives) to play, 1 to {MAX_GAMES:_} (default: 10)")
    parser.add_argument("--video", metavar="PATH.mp4", default=None,
                        help="film the first game to this .mp4: a bare name goes into the run's folder, where "
                             "the dashboard shows it; a path with a folder (./NAME.mp4 too) where it says "
                             "(default: no video)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--greedy", dest="greedy", action="store_true", default=False,
                      help="act by argmax of the policy's logits")
    mode.add_argument("--sample", dest="greedy", action="store_false",
                      help="act by sampling softmax(logits): the policy PPO trained, whose score training "
                           "reports (the default)")
    parser.add_argument("--epsilon", metavar="E", default=None,
                        help="probability of a uniformly random action instead (default "
                             f"{DEFAULT_GREEDY_EPSILON} with --greedy: breaks deterministic loops; 0 with --sample)")
    parser.add_argument("--seed", metavar="S", default="0",
                        help=f"seeds the games' no-op starts and the action draws, 0 to {MAX_SEED:_} (default: 0)")
    parser.add_argument("--device", metavar="DEVICE", default="auto",
                        help="auto (CUDA when present; the default), cpu, cuda or cuda:N")
    parser.add_argument("--max-steps", metavar="N", default=None,
                        help=f"stop a game after N agent steps (1 to {MAX_UPDATES:_}) and flag it truncated "
                             "(default: none, only the run's own max_episode_frames cap)")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    games = _int("--games", args.games, 1, MAX_GAMES)
    seed = _int("--seed", args.seed, 0, MAX_SEED)
    assert games is not None and seed is not None  # both have defaults, so never none
    max_steps = _int("--max-steps", args.max_steps, 1, MAX_UPDATES, allow_none=True)
    epsilon = _epsilon(args.epsilon, args.greedy)
    check_device_name(args.device)
    video = _video_path(args.video)
    located = locate_checkpoint(args.run, args.checkpoint, args.data_dir)
    path = located.path
    # The learner (torch) once the command line and the run are accepted.
    from ppo.evaluation import evaluation_spec, model_from_checkpoint, play_games, summarize

    device = parse_device(args.device)
    point = read_checked(path)
    state = point.checkpoint
    spec = evaluation_spec(state.config, seed)
    model = model_from_checkpoint(state.stored(), device)
    if video is not None:
        video = film_in_run_folder(args.video, video, path, located.run_dir)

    assert games is not None and seed is not None
    mode = "greedy" if args.greedy else "sampled"
    say(f"evaluating {path} (update {state.update}, {state.env_steps} env steps): "
          f"{games} game(s) of {spec.game}, {mode} actions, ε={epsilon:g}, seed {seed}, on {device}")

    def report(index: int, e: EpisodeStats) -> None:
        flag = " (truncated)" if e.truncated else ""
        say(f"game {index + 1}/{games}: score {e.score:g} in {e.length} steps{flag}")

    episodes = play_games(model, spec, games, device, greedy=args.greedy, epsilon=epsilon, seed=seed,
                          video_path=video, max_steps=max_steps, on_game=report)
    scores = [e.score for e in episodes]
    stats = summarize(scores)
    truncated = sum(e.truncated for e in episodes)
    say(f"score {stats['mean']:.2f} ± {stats['std']:.2f} over {games} game(s) "
          f"(min {stats['min']:g}, max {stats['max']:g})"
          + (f"; {truncated} truncated, their scores are partial" if truncated else ""))
    if video is not None:
        say(f"video of game 1: {shown(video)}")
    result = {
        "games": games,
        "scores": scores,
        "lengths": [e.length for e in episodes],
        "truncated": [e.truncated for e in episodes],
        **stats,
        "checkpoint": str(path),
        "video": shown(video) if video is not None else None,
        "greedy": args.greedy,
        "epsilon": epsilon,
        "seed": seed,
        "game": spec.game,
        "run_uuid": located.run_uuid,
        "update": state.update,
        "env_steps": state.env_steps,
    }
    print(json.dumps(result), flush=True)  # stdout's one line: `$(python -m experiments.evaluate …)` is the JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
