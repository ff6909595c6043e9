"""Every hyperparameter of the experiment, its default, and where the default comes from.

Defaults follow the PPO paper's Atari setting (Schulman et al. 2017, table 5) as refined by
"The 37 implementation details of PPO" (Huang et al. 2022) and OpenAI baselines' `ppo2` Atari
config, unless a comment says otherwise. `PPOConfig` is the single source: the command line,
labml's configs view, checkpoints and the live-tweak channel are all derived from it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from configs.fields import (
    BACKENDS,
    MAX_ENV_STEPS,
    MAX_SEED,
    MAX_THREADS,
    MAX_UPDATES,
    MAX_WORKERS,
    RELAUNCHES,
    ConfigError,
    Within,
    braced,
    check_field,
    device_name,
    folder_name,
    folder_path,
    hp,
    integral,
    live_value_problem_in,
    non_negative,
    not_empty,
    one_of,
    optional_non_negative,
    optional_positive,
    positive,
    precision_name,
    unit_interval,
)
from configs.machine import local_workers_problem, rollout_problem, url_problem


@dataclass(frozen=True)
class PPOConfig:
    # ---- the game ----
    game: str = hp("Breakout", "ALE game name (Pong, Seaquest, …; any case) or gymnasium id; always no frame-skip, no sticky actions",
                   not_empty, metavar="GAME")
    noop_max: int = hp(30, "up to this many random no-op frames after each reset (Mnih et al. 2015)", Within(0, 10_000))
    fire_on_reset: bool = hp(True, "launch the ball after reset and after each lost life, so the agent cannot learn to stall")
    relaunch: str = hp("fire", "how: fire, or noop-fire-right as SB3's AtariWrapper (NOOP, FIRE, RIGHT after a lost "
                               "life; FIRE, RIGHT after a reset)", one_of(*RELAUNCHES), metavar=braced(RELAUNCHES))
    terminal_on_life_loss: bool = hp(True, "a lost life ends the learner's episode (Mnih et al. 2015); the game goes on")
    reset_stack_on_life_loss: bool = hp(False, "after a lost life, fill the frame stack with the relaunch frame, as after a reset "
                                               "(baselines/SB3 zero it); off: the stack keeps the last life's frames")
    clip_rewards: bool = hp(True, "learner's reward = sign(reward), one scale for all games (Mnih et al. 2015)")
    frame_skip: int = hp(4, "emulator frames per agent step, max-pooled over the last two", Within(1, 64))
    frame_stack: int = hp(4, "processed 84×84 frames stacked into one observation", Within(1, 64))
    max_episode_frames: int = hp(108_000, "truncate a game after this many frames (30 min at 60 Hz; Machado et al. 2018)", Within(1, MAX_UPDATES))

    # ---- rollouts ----
    n_workers: int = hp(8, "env worker processes (baselines ppo2: 8 envs). Without this and --envs-per-worker a local run "
                           "groups its 8 games by the usable cores: 1 core → 1 process × 8 games, 2–3 → 2 × 4, 4–7 → 4 × 2, "
                           "8 or more → 8 × 1 (grouped_for_cores); a local run takes at most 8 a usable core (16 at least)",
                       Within(1, MAX_WORKERS))
    envs_per_worker: int = hp(1, "games stepped by each worker process; games = n_workers × envs_per_worker", Within(1, 1024))
    worker_steps: int = hp(128, "steps per env per rollout (ppo2 nsteps)", Within(1, 100_000))
    backend: str = hp("local", "env workers: local (processes here), ray (Ray actors; pip install -e .[ray]) or serial (in the trainer's process)",
                      one_of(*BACKENDS), run_option=True, metavar=braced(BACKENDS))
    ray_address: str | None = hp(None, "--backend ray: cluster to join: auto, HOST:PORT or ray://HOST:PORT (default: none, a private local Ray)",
                                 run_option=True, metavar="ADDRESS")
    ray_cpus_per_worker: float = hp(1.0, "--backend ray: CPUs Ray reserves per env actor (fractions pack actors per core)",
                                      Within(0.0, 1024.0, low_open=True), run_option=True)

    # ---- optimisation ----
    total_env_steps: int = hp(10_000_000, "agent steps (not frames) over the run, as in the PPO paper's 10M", Within(1, MAX_ENV_STEPS))
    stop_after_env_steps: int | None = hp(None, "end the run once this many agent steps are taken, the schedules still spanning "
                                                "total_env_steps (a learning curve at a budget) (default: none, the whole schedule)",
                                          Within(1, MAX_ENV_STEPS, optional=True), run_option=True)
    updates: int | None = hp(None, "number of updates (default: derived, total_env_steps // batch_size)", Within(1, MAX_UPDATES, optional=True))
    epochs: int = hp(4, "passes over each rollout (ppo2 noptepochs)", positive, live=(1, 32))
    minibatches: int = hp(4, "minibatches per epoch; must divide the batch (ppo2 nminibatches)", positive)
    gamma: float = hp(0.99, "discount factor", unit_interval)
    gae_lambda: float = hp(0.95, "GAE λ: bias/variance trade-off of the advantage", unit_interval)
    learning_rate: float = hp(2.5e-4, "Adam step size at the start; the base of the annealing", non_negative, live=(0.0, 1e-2))
    anneal_learning_rate: bool = hp(True, "decay the learning rate linearly to 0 over the run")
    clip_range: float = hp(0.1, "PPO clip ε at the start (paper: 0.1 × α for Atari)", non_negative, live=(0.0, 1.0))
    anneal_clip_range: bool = hp(True, "decay the clip range linearly to 0 over the run")
    clip_value_loss: bool = hp(True, "clip the value update around the old value (ppo2)")
    # 0.5 holds back only a value that jumps by over half a (clipped) reward in one update: about one
    # sample in 5,000, so the critic keeps learning to the end. Tied to the annealed policy clip
    # (`none`, ppo2's rule) it held back a third of the batch by mid-run and learned slower on five
    # paired seeds to 1M (docs/results.md, "The value clip").
    value_clip_range: float | None = hp(0.5, "value clip ε, fixed, never annealed (CleanRL: 0.1); none: the policy's "
                                             "clip range, annealed with it (ppo2)", optional_non_negative)
    value_coef: float = hp(0.5, "weight of the value loss", non_negative, live=(0.0, 10.0))
    entropy_coef: float = hp(0.01, "weight of the entropy bonus", non_negative, live=(0.0, 1.0))
    max_grad_norm: float = hp(0.5, "clip the global gradient norm to this", positive)
    adam_eps: float = hp(1e-5, "Adam ε (ppo2; PyTorch's 1e-8 default differs)", positive)
    normalize_advantages: bool = hp(True, "standardise advantages per minibatch")
    target_kl: float | None = hp(None, "stop the epochs early once approximate KL exceeds this (default: none, never)", optional_positive)

    # ---- the run ----
    seed: int = hp(0, "run seed: derives every env seed and the trainer's numpy/torch seeds", Within(0, MAX_SEED))
    device: str = hp("auto", "auto (CUDA when present), cpu, cuda or cuda:N", device_name, run_option=True, metavar="DEVICE")
    torch_threads: int = hp(0, "trainer's torch threads for optimisation; 0 = one per core", Within(0, MAX_THREADS), run_option=True)
    sample_threads: int = hp(1, "torch threads for inference while sampling (a batch of n_envs is too small to split)", Within(1, MAX_THREADS), run_option=True)
    overlap_sampling: bool = hp(True, "step half the workers while the network acts for the other half (needs ≥ 2 workers)", run_option=True)
    # ARITHMETIC, not the braced list: five names in braces are wider than a phone's screen (docs/reference).
    precision: str = hp("auto", "the network's arithmetic: auto (= fp32), fp32; bf16 autocast (weights, Adam in fp32; "
                                "AVX512-BF16/AMX CPUs, CUDA), faster, not shown to learn as much per step (docs/precision.md); "
                                "bf16-then-fp32: the last tenth of updates in fp32; bf16-emulated: bf16's numbers on fp32 CPU "
                                "kernels, for studies", precision_name, run_option=True, metavar="ARITHMETIC")
    channels_last: bool = hp(True, "NHWC convolutions: same results, faster on CPU (oneDNN) and on tensor cores", run_option=True)
    name: str = hp("breakout", "labml experiment name (a folder under data_dir)", folder_name, metavar="NAME")
    data_dir: str = hp("runs", "folder that holds runs: data_dir/name/run_uuid/", folder_path, run_option=True, metavar="DIR")
    checkpoint_every: int = hp(50, "checkpoint every this many updates (and always at the end); 0 = only at the end", Within(0, MAX_UPDATES), run_option=True)
    score_window: int = hp(100, "games averaged for the reported score (the Atari convention: last 100)", Within(1, 100_000))
    max_worker_restarts: int = hp(3, "a worker that fails more often than this within restart_window updates stops the run",
                                   Within(0, 1_000_000), run_option=True)
    restart_window: int = hp(100, "updates over which max_worker_restarts is counted", Within(1, MAX_UPDATES), run_option=True)
    skip_nonfinite: bool = hp(False, "on a NaN/inf loss skip that minibatch and count it, instead of stopping the run", run_option=True)
    worker_timeout: float = hp(60.0, "seconds a worker may take to answer before it is declared hung", Within(0.0, 86_400.0, low_open=True), run_option=True)
    eval_video_every: int = hp(0, "film one game to run_dir/videos/update_NNNNNN.mp4 every this many updates; 0 = never",
                                Within(0, MAX_UPDATES), run_option=True)
    dashboard: str | None = hp(None, "labml dashboard to send the run to: http://127.0.0.1:5005 (or a full app_url …/api/v1/default) "
                                     "(default: none, not sent)", run_option=True, metavar="URL")
    dashboard_wait: float = hp(30.0, "seconds a run's end waits for the dashboard to take its last updates (labml's sender "
                                     "retries forever); then it warns and exits, the updates kept in the run folder",
                               Within(0.0, 3600.0, low_open=True), run_option=True)

    # ---- derived sizes: computed once, after validation ----
    @property
    def n_envs(self) -> int:
        return self.n_workers * self.envs_per_worker

    @property
    def batch_size(self) -> int:
        return self.n_envs * self.worker_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.minibatches

    @property
    def n_updates(self) -> int:
        return self.updates if self.updates is not None else self.total_env_steps // self.batch_size

    @property
    def schedule_env_steps(self) -> int:
        """The agent steps the annealing was asked to span: total_env_steps, or updates × batch_size when the
        updates were given. A 1M schedule in batches of 1,024 ends at 999,424 steps; its budget is still 1M."""
        return self.updates * self.batch_size if self.updates is not None else self.total_env_steps

    def value_clip_for(self, policy_clip: float) -> float | None:
        """The value clip ε of an update whose policy clip is `policy_clip` (annealed or not): none
        without a value clip, the fixed `value_clip_range`, or, when that is none, the policy's own
        (ppo2's rule). The one place the rule lives: the trainer and the benchmark both ask here."""
        if not self.clip_value_loss:
            return None
        return policy_clip if self.value_clip_range is None else self.value_clip_range

    @property
    def last_update(self) -> int:
        """The update after which this run ends: n_updates, or earlier with stop_after_env_steps."""
        if self.stop_after_env_steps is None:
            return self.n_updates
        return min(self.n_updates, -(-self.stop_after_env_steps // self.batch_size))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def non_defaults(self) -> dict[str, Any]:
        """The fields whose values differ from the defaults: what this run set (its labml overrides,
        the settings a longer run carries over)."""
        defaults = PPOConfig().to_dict()
        return {k: v for k, v in self.to_dict().items() if v != defaults[k]}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PPOConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(unknown[0], values[unknown[0]], f"one of the options in --help (unknown name {unknown[0]!r})")
        return cls(**values)


# ---- how --help groups the fields: section title → its fields, shown in this order ----------------
SECTIONS: dict[str, tuple[str, ...]] = {
    "the game and its preprocessing": ("game", "noop_max", "fire_on_reset", "relaunch", "terminal_on_life_loss", "reset_stack_on_life_loss",
                                       "clip_rewards", "frame_skip", "frame_stack", "max_episode_frames"),
    "batch and schedule": ("n_workers", "envs_per_worker", "worker_steps", "total_env_steps", "stop_after_env_steps", "updates",
                           "epochs", "minibatches"),
    "PPO losses and optimiser": ("gamma", "gae_lambda", "learning_rate", "anneal_learning_rate", "clip_range", "anneal_clip_range",
                                 "clip_value_loss", "value_clip_range", "value_coef", "entropy_coef", "max_grad_norm", "adam_eps",
                                 "normalize_advantages", "target_kl"),
    "where and how it computes (run options)": ("backend", "ray_address", "ray_cpus_per_worker", "device", "torch_threads",
                                                "sample_threads", "overlap_sampling", "precision", "channels_last"),
    "the run: seed, output, dashboard": ("seed", "name", "data_dir", "checkpoint_every", "score_window", "eval_video_every", "dashboard", "dashboard_wait"),
    "faults": ("max_worker_restarts", "restart_window", "skip_nonfinite", "worker_timeout"),
}

# ---- read once from the declarations above: the tables every layer reads --------------------------
FIELDS: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(PPOConfig)
SECTION_OF: Mapping[str, str] = MappingProxyType({name: title for title, names in SECTIONS.items() for name in names})
# Every field in exactly one section, checked as the module loads: a new field cannot silently miss
# the command line, nor a renamed one leave a stale name here.
if sorted(SECTION_OF) != sorted(f.name for f in FIELDS) or len(SECTION_OF) != sum(map(len, SECTIONS.values())):
    raise RuntimeError(f"configs.ppo.SECTIONS must list every PPOConfig field once: {sorted(set(SECTION_OF) ^ {f.name for f in FIELDS})}")

LiveValues = dict[str, float]  # the live hyperparameters' values by name (an int for `epochs`)
# The dynamic hyperparameters and their allowed ranges.
LIVE_RANGES: Mapping[str, tuple[float, float]] = MappingProxyType({f.name: f.metadata["live"] for f in FIELDS if f.metadata["live"] is not None})


def live_value_problem(name: str, value: object) -> str | None:
    """What is wrong with `value` as the live hyperparameter `name` (the "accepted" text), or None
    when it may be applied: the rule (`live_value_problem_in`) with the field's own range."""
    return live_value_problem_in(value, *LIVE_RANGES[name], integral(PPOConfig.__dataclass_fields__[name]))


def accepted_live_values(received: Mapping[str, Any], fallback: Mapping[str, float]) -> tuple[LiveValues, dict[str, str]]:
    """(the live values to apply, the refused ones): each live value of `received` that
    `live_value_problem` allows, as its field's type (an int for `epochs`), else `fallback`'s value
    (none where `fallback` has none); refused: name → what is accepted, names that are no live
    hyperparameter included. Every place that takes live values from outside (the dashboard, a
    checkpoint) takes them through here."""
    accepted: LiveValues = {}
    refused: dict[str, str] = {}
    for name in [*LIVE_RANGES, *(k for k in received if k not in LIVE_RANGES)]:
        if name not in LIVE_RANGES:
            refused[name] = "a live hyperparameter"
            continue
        if name not in received and name not in fallback:
            continue
        value = received.get(name, fallback.get(name))
        if (problem := live_value_problem(name, value)) is None:
            accepted[name] = int(value) if integral(PPOConfig.__dataclass_fields__[name]) else float(value)
        else:
            refused[name] = problem
            if name in fallback:
                accepted[name] = fallback[name]
    return accepted, refused


def _importable(module: str) -> bool:
    """Whether `module` can be imported, without importing it (Ray takes a second to import)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
        return False


def validate(config: PPOConfig, game_exists: Callable[[str], bool] | None = None) -> PPOConfig:
    """Check every value, then every combination; raise `ConfigError` on the first bad one.
    `game_exists` checks the game's name (not checked without it)."""
    for f in FIELDS:
        check_field(f, getattr(config, f.name))
    # Which games exist is the emulator's knowledge, not the config's: the caller passes the check
    # in (`game.atari.is_known_game`), so this package never imports the game package.
    if game_exists is not None and not game_exists(config.game):
        raise ConfigError("game", config.game, "an ALE game such as Breakout or Pong, or an id like ALE/Breakout-v5")
    _check_sizes(config)
    _check_backend(config)
    if config.backend == "local" and (problem := local_workers_problem(config.n_workers)):
        raise ConfigError("n_workers", config.n_workers, problem)
    if problem := rollout_problem(config.n_workers, config.envs_per_worker, config.worker_steps, config.frame_stack):
        raise ConfigError("worker_steps", config.worker_steps, problem)
    if config.dashboard is not None and (problem := url_problem(config.dashboard)):
        raise ConfigError("dashboard", config.dashboard, problem)
    return config


def _check_sizes(config: PPOConfig) -> None:
    shape = f"n_workers {config.n_workers} × envs_per_worker {config.envs_per_worker} × worker_steps {config.worker_steps}"
    if config.batch_size % config.minibatches:
        raise ConfigError("minibatches", config.minibatches, f"a divisor of the batch size {config.batch_size} ({shape})")
    if config.n_updates < 1:
        raise ConfigError("total_env_steps", config.total_env_steps, f"at least one batch of {config.batch_size} steps ({shape})")


def _check_backend(config: PPOConfig) -> None:
    if config.ray_address is not None:
        if config.backend != "ray":
            raise ConfigError("ray_address", config.ray_address, "to be given with --backend ray")
        if not re.fullmatch(r"auto|(ray://)?[^\s:/]+:\d{1,5}", config.ray_address):
            raise ConfigError("ray_address", config.ray_address, "auto, HOST:PORT or ray://HOST:PORT")
    if config.backend == "ray" and not _importable("ray"):
        raise ConfigError("backend", config.backend, 'Ray installed for it: pip install -e ".[ray]"')
