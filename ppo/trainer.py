"""One PPO update = collect a rollout from every env, then optimise the clipped objective on it.

Framework-free: labml bookkeeping lives in `experiments/`, so this is testable on its own.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from configs.ppo import PPOConfig, live_ranges, live_value_problem
from game.vector import EnvPool, PoolError, StepBatch, WorkerKeepsFailing
from ppo.checkpoint import check_fits, sampled_on
from ppo.devices import resolve_precision
from ppo.losses import explained_variance, ppo_loss
from ppo.model import ActorCritic, sample_actions
from ppo.rollout import Batch, Rollout
from ppo.seeding import Seeds, resumed_sampling_seed
from ppo.threads import torch_threads


class GameRecord(NamedTuple):
    """One finished game, as a row of the run's games.csv."""

    env_step: int  # agent steps taken over all envs when it ended
    update: int  # the update whose rollout it ended in (1-based)
    score: float  # full game, all lives, unclipped
    length: int  # agent steps
    truncated: bool  # ended by the time limit rather than game over


@dataclass(frozen=True)
class IterationSettings:
    """The hyperparameters one iteration uses: live values read once, annealing applied."""

    learning_rate: float
    clip_range: float  # policy ratio clip ε
    value_clip_range: float | None  # None: the value loss is not clipped
    value_coef: float
    entropy_coef: float
    epochs: int


def acting_groups(config: PPOConfig) -> list[tuple[range, slice]]:
    """The worker processes, and their games, that the network acts for in one forward pass: with
    overlapped sampling (≥ 2 workers) the first half of the workers and then the rest, else all of
    them at once. The batch's size changes the last bits of the logits (the matrix products block
    differently), so two groupings of the same games learn bit for bit alike only when these games
    match: for 8 games every grouping but 1 × 8 splits them 4 and 4."""
    workers, games = config.n_workers, config.n_envs
    if not (config.overlap_sampling and workers >= 2):
        return [(range(workers), slice(0, games))]
    half, per_worker = workers // 2, games // workers
    return [(range(0, half), slice(0, half * per_worker)), (range(half, workers), slice(half * per_worker, games))]


MINIBATCH_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "value_clip_fraction")


class LearnerSnapshot(NamedTuple):
    """Copies of what one update changes: the parameters, Adam's state and the minibatch shuffle."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    shuffle: Mapping[str, Any]


class NonFiniteLoss(FloatingPointError):
    """A loss, gradient or parameter became NaN/inf; the update was not applied."""


class UpdateAbandoned(RuntimeError):
    """A stop was requested mid-update: the update was not applied (model, Adam and shuffle as before it)."""


class Trainer:
    def __init__(self, config: PPOConfig, pool: EnvPool, seeds: Seeds, device: torch.device,
                 live_values: Callable[[], dict[str, Any]] | None = None, on_event: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.pool = pool
        self.device = device
        # Where the live hyperparameters come from: labml's dynamic values in a run, the config here.
        self.live_values = live_values or (lambda: {k: getattr(config, k) for k in live_ranges()})
        # Set before initialising: orthogonal init runs a QR whose last bits depend on the thread
        # count, and the same seed must give the same model whatever ran in this process before.
        self.train_threads = config.torch_threads or os.cpu_count() or 1
        # A batch of n_envs observations is too small to split over threads (see ppo/threads.py).
        self.sample_threads = config.sample_threads if device.type == "cpu" else self.train_threads
        with torch_threads(self.train_threads):
            torch.manual_seed(seeds.torch_seed)
            self.model = ActorCritic(pool.n_actions, config.frame_stack, config.channels_last,
                                     resolve_precision(config.precision, device)).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.learning_rate, eps=config.adam_eps)
        self.torch_seed = seeds.torch_seed
        self.sample_generator = torch.Generator(device=device)
        self.sample_generator.manual_seed(seeds.torch_seed)
        self.shuffle_rng = np.random.default_rng(seeds.numpy_seed)
        self.rollout = Rollout(pool.n_envs, config.worker_steps, pool.observations.shape[1:])
        self.update = 0  # updates completed
        self.env_steps = 0  # agent steps taken, over all envs
        self.games = 0  # full games finished
        self.scores: deque[float] = deque(maxlen=config.score_window)  # full-game, unclipped
        self.lengths: deque[int] = deque(maxlen=config.score_window)
        self.finished_games: list[GameRecord] = []  # since the caller last took them (take_finished_games)
        self.nonfinite_skipped = 0  # minibatches skipped for a NaN/inf loss (skip_nonfinite)
        # Where the trainer's events go (a worker replaced, a live value refused): the run's log.
        self.on_event: Callable[[str], None] = on_event or print
        pool.on_restart = self.on_event

    # -- sampling -------------------------------------------------------------------------------

    @torch.inference_mode()
    def _policy(self, observations: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, values = self.model(torch.from_numpy(observations).to(self.device, non_blocking=True))
        actions = sample_actions(logits, self.sample_generator)
        log_probs = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return actions, log_probs, values

    @torch.inference_mode()
    def _values(self, observations: np.ndarray) -> np.ndarray:
        return self.model(torch.from_numpy(observations).to(self.device))[1].cpu().numpy()

    def collect(self) -> None:
        """Fill the rollout: worker_steps steps of every env, sampled from the current policy.

        A worker that dies, hangs or raises is replaced (fresh derived seeds) and the rollout starts
        over from the envs' current states: the interrupted trajectories are dropped whole, so no
        transition ever straddles the replacement. Games already finished still count.
        """
        self.pool.with_restarts(self._collect_once, tick=self.update)

    def reset_envs(self) -> None:
        """Start a new game in every env (a run's start)."""
        self.pool.with_restarts(self.pool.reset, tick=self.update)

    def _collect_once(self) -> None:
        rollout, pool = self.rollout, self.pool
        with torch_threads(self.sample_threads):
            try:
                groups = acting_groups(self.config)
                if len(groups) == 2:
                    self._collect_overlapped(groups)
                else:
                    every = slice(0, pool.n_envs)
                    for t in range(rollout.n_steps):
                        self._record(pool.step(self._act(every, t)), every, t)
            except PoolError:
                pool.drain()  # the other half may still be stepping: read its reply before a restart
                raise
            rollout.last_values[:] = self._values(pool.observations)
        self.env_steps += rollout.size

    def _collect_overlapped(self, groups: list[tuple[range, slice]]) -> None:
        """Double-buffered sampling: one half of the workers steps while the network chooses the
        other half's actions, so neither the envs nor the network waits for the other."""
        for workers, envs in groups:
            self.pool.step_async(self._act(envs, 0), workers)
        for t in range(self.rollout.n_steps):
            for workers, envs in groups:
                self._record(self.pool.step_wait(workers), envs, t)
                if t + 1 < self.rollout.n_steps:
                    self.pool.step_async(self._act(envs, t + 1), workers)

    def _act(self, envs: slice, t: int) -> np.ndarray:
        """Choose actions for `envs` at step t from their current observations; store them."""
        rollout = self.rollout
        observations = self.pool.observations[envs]
        rollout.observations[envs, t] = observations
        actions, log_probs, values = self._policy(observations)
        actions_np = actions.cpu().numpy()
        rollout.actions[envs, t] = actions_np
        rollout.log_probs[envs, t] = log_probs.cpu().numpy()
        rollout.values[envs, t] = values.cpu().numpy()
        return actions_np

    def _record(self, step: StepBatch, envs: slice, t: int) -> None:
        rollout = self.rollout
        rollout.rewards[envs, t] = step.rewards
        rollout.terminals[envs, t] = step.terminals
        rollout.truncations[envs, t] = step.truncations
        if step.final_observations:  # rare: bootstrap the time-limited episodes
            truncated = sorted(step.final_observations)
            final = np.stack([step.final_observations[i] for i in truncated])
            rollout.truncation_values[truncated, t] = self._values(final)
        # The agent steps taken over all envs when these games ended (this step included).
        env_step = self.env_steps + (t + 1) * self.rollout.n_envs
        for _, game in step.episodes:
            self.finished_games.append(GameRecord(env_step, self.update + 1, game.score, game.length, game.truncated))
            self.scores.append(game.score)
            self.lengths.append(game.length)
            self.games += 1

    # -- one iteration -------------------------------------------------------------------------

    def iteration(self) -> dict[str, float]:
        """One PPO iteration: sample a rollout with the current policy, then improve the policy on it."""
        settings = self.schedule()  # frozen for the whole iteration, whatever the dashboard sends meanwhile
        started = time.perf_counter()
        self.collect()  # worker_steps × n_envs transitions (workers replaced and rollout redone on a fault)
        sampled = time.perf_counter()
        metrics = self.optimize(settings)  # GAE, then epochs × minibatches of clipped updates
        done = time.perf_counter()
        self.update += 1
        metrics.update(
            learning_rate=settings.learning_rate, clip_range=settings.clip_range,
            sps=self.rollout.size / (done - started), sample_sps=self.rollout.size / (sampled - started),
            update_sps=self.rollout.size / (done - sampled),
            worker_restarts=self.pool.restarts, nonfinite_skipped=self.nonfinite_skipped,
        )
        if settings.value_clip_range is not None:  # none without a value clip
            metrics["value_clip_range"] = settings.value_clip_range
        if self.scores:
            metrics["score_mean_100"] = float(np.mean(self.scores))
            metrics["game_length_mean_100"] = float(np.mean(self.lengths))
        return metrics

    # Asked between minibatches; True abandons the update in progress (`UpdateAbandoned`). The run
    # sets it to "a stop was requested", so Ctrl-C/SIGTERM never waits for a whole update.
    should_stop: Callable[[], bool] | None = None
    # The live values this trainer last applied, each checked against its range in configs/ppo.py.
    live_in_use: dict[str, Any] | None = None
    _refused: dict[str, Any] | None = None  # name -> the refused value already reported

    def schedule(self) -> IterationSettings:
        """This iteration's hyperparameters: the live values, the annealed ones decayed linearly."""
        live, config = self._checked_live_values(), self.config
        remaining = 1.0 - self.update / config.n_updates
        clip_range = live["clip_range"] * (remaining if config.anneal_clip_range else 1.0)
        return IterationSettings(
            learning_rate=live["learning_rate"] * (remaining if config.anneal_learning_rate else 1.0),
            # Tied to the annealed policy clip (ppo2), the value clip shrinks to 0 late in a run and
            # freezes the critic; a fixed `value_clip_range` (the default) keeps it learning to the end.
            clip_range=clip_range, value_clip_range=config.value_clip_for(clip_range),
            value_coef=live["value_coef"], entropy_coef=live["entropy_coef"], epochs=int(live["epochs"]),
        )

    def _checked_live_values(self) -> dict[str, Any]:
        """The live values, each one outside its range (or not a finite number) replaced by the last
        good value and reported once: whatever a dashboard or a checkpoint says, the trainer never
        applies a value configs/ppo.py does not allow (a negative learning rate, a million epochs)."""
        good = dict(self.live_in_use or {k: getattr(self.config, k) for k in live_ranges()})
        refused = self._refused if self._refused is not None else {}
        received = self.live_values()
        for name in live_ranges():
            value = received.get(name, good[name])
            problem = live_value_problem(name, value)
            if problem is None:
                good[name] = int(value) if isinstance(good[name], int) else float(value)
                refused.pop(name, None)
            elif name not in refused or repr(refused[name]) != repr(value):  # one line per refused value (NaN too), not per update
                refused[name] = value
                self.on_event(f"refused live value {name} = {value!r}: expected {problem}; keeping {good[name]!r}")
        self.live_in_use, self._refused = good, refused
        return good

    @staticmethod
    def _check_settings(settings: IterationSettings) -> None:
        """Refuse settings outside the live ranges before they touch the model (they may come from
        anywhere, not only from `schedule`). Annealed values lie in [0, base], so the ranges hold."""
        for name in ("learning_rate", "clip_range", "value_coef", "entropy_coef", "epochs"):
            value = getattr(settings, name)
            if (problem := live_value_problem(name, value)) is not None:
                raise ValueError(f"refusing to optimise with {name} = {value!r}: expected {problem}")
        if settings.value_clip_range is not None and not (math.isfinite(settings.value_clip_range) and settings.value_clip_range >= 0):
            raise ValueError(f"refusing to optimise with value_clip_range = {settings.value_clip_range!r}: expected a finite number ≥ 0")

    def optimize(self, settings: IterationSettings) -> dict[str, float]:
        """GAE on the rollout, then `epochs` passes of shuffled minibatch updates. If anything goes
        NaN/inf the model, optimizer and shuffle are put back exactly as they were, and `NonFiniteLoss` is raised;
        the same when `should_stop` says so between two minibatches (`UpdateAbandoned`)."""
        config = self.config
        self._check_settings(settings)
        with self._undone_on_nonfinite(), torch_threads(self.train_threads):
            batch = self.rollout.batch(config.gamma, config.gae_lambda, self.device, self.model.channels_last)
            for group in self.optimizer.param_groups:
                group["lr"] = settings.learning_rate
            stats: list[dict[str, float]] = []
            epochs_done = 0
            for _ in range(settings.epochs):
                order = torch.from_numpy(self.shuffle_rng.permutation(self.rollout.size)).to(self.device)
                epoch: list[dict[str, float]] = []
                for minibatch in batch.minibatches(order, config.minibatch_size):
                    if self.should_stop is not None and self.should_stop():
                        # Rolled back by _undone_on_nonfinite: the update is applied whole or not at all.
                        raise UpdateAbandoned(f"stop requested during update {self.update + 1}; that update was not applied")
                    if (s := self._minibatch_update(minibatch, settings)) is not None:
                        epoch.append(s)
                stats += epoch
                epochs_done += 1
                if config.target_kl is not None and epoch and float(np.mean([s["approx_kl"] for s in epoch])) > config.target_kl:
                    break  # the policy moved too far from the one that sampled: stop early
            metrics = {k: sum(s[k] for s in stats) / max(len(stats), 1) for k in MINIBATCH_METRICS}
            metrics["explained_variance"] = explained_variance(batch.values, batch.returns)
            metrics["epochs_done"] = epochs_done
            return metrics

    def _minibatch_update(self, minibatch: Batch, settings: IterationSettings) -> dict[str, float] | None:
        """One Adam step on the PPO loss; None when a NaN/inf was skipped (`skip_nonfinite`)."""
        logits, values = self.model(minibatch.observations)
        loss = ppo_loss(logits, values, minibatch.actions, minibatch.log_probs, minibatch.values, minibatch.advantages,
                        minibatch.returns, clip_range=settings.clip_range, value_clip_range=settings.value_clip_range,
                        value_coef=settings.value_coef, entropy_coef=settings.entropy_coef,
                        normalize_advantages=self.config.normalize_advantages)
        self.optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        metrics = {"policy_loss": loss.policy.loss, "value_loss": loss.value.loss, "entropy": loss.entropy,
                   "approx_kl": loss.policy.approx_kl, "clip_fraction": loss.policy.clip_fraction,
                   "value_clip_fraction": loss.value.clip_fraction}
        # One device-to-host copy for the finiteness check and every metric: each `.item()` waits for
        # the device to finish its queue, so reading them one by one would stall a GPU 7 times here.
        total, norm, *values = torch.stack([t.detach().float() for t in (loss.total, grad_norm, *metrics.values())]).tolist()
        if not (math.isfinite(total) and math.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            if self.config.skip_nonfinite:
                self.nonfinite_skipped += 1
                return None
            raise NonFiniteLoss(f"non-finite loss ({total}) or gradient norm ({norm}); update not applied")
        self.optimizer.step()
        return dict(zip(metrics, values, strict=True))

    def snapshot(self) -> LearnerSnapshot:
        """What `optimize` changes, copied, so that `restore` can put it back any number of times."""
        return LearnerSnapshot(model={k: v.clone() for k, v in self.model.state_dict().items()},
                               optimizer=copy.deepcopy(self.optimizer.state_dict()),
                               shuffle=copy.deepcopy(self.shuffle_rng.bit_generator.state))

    def restore(self, snapshot: LearnerSnapshot) -> None:
        """Parameters, Adam's state and the shuffle exactly as `snapshot` took them."""
        self.model.load_state_dict(snapshot.model)  # copied into the parameters
        # Copied again: Adam adopts the tensors it loads and steps them in place, which would change
        # the snapshot, and a second restore would then start from the first one's end.
        self.optimizer.load_state_dict(copy.deepcopy(snapshot.optimizer))
        self.shuffle_rng.bit_generator.state = snapshot.shuffle

    @contextlib.contextmanager
    def _undone_on_nonfinite(self) -> Iterator[None]:
        before = self.snapshot()
        try:
            yield
            if not all(torch.isfinite(p).all() for p in self.model.parameters()):
                raise NonFiniteLoss("parameters became NaN/inf; update not applied")
        except (NonFiniteLoss, UpdateAbandoned):
            self.restore(before)
            raise

    def take_finished_games(self) -> list[GameRecord]:
        """The games finished since the last call, oldest first (for the run's games.csv)."""
        games, self.finished_games = self.finished_games, []
        return games

    @property
    def worker_restarts(self) -> int:
        """Workers the pool replaced over the whole run (saved in checkpoints)."""
        return self.pool.restarts

    def score_mean(self) -> float | None:
        return float(np.mean(self.scores)) if self.scores else None

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self, live_values: dict[str, Any]) -> dict[str, Any]:
        try:
            # A worker found dead here is replaced (and counted) like one found dead while sampling.
            env_states = self.pool.with_restarts(self.pool.get_state, tick=self.update)
        except (PoolError, WorkerKeepsFailing):  # the learner is still saved; games start afresh
            env_states = None
        return {
            "config": self.config.to_dict(),
            "n_actions": self.pool.n_actions,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "update": self.update,
            "env_steps": self.env_steps,
            "games": self.games,
            "scores": list(self.scores),
            "lengths": list(self.lengths),
            "live_values": live_values,
            "sample_generator": self.sample_generator.get_state(),
            "sample_generator_device": self.device.type,
            "shuffle_rng": self.shuffle_rng.bit_generator.state,
            "env_states": env_states,
            "worker_restarts": self.pool.restarts,
            "nonfinite_skipped": self.nonfinite_skipped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint; `CheckpointError` if it belongs to another game or model."""
        check_fits(state, self.pool.n_actions, self.config.frame_stack, self.config.game, into=self.model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.update = state["update"]
        self.env_steps = state["env_steps"]
        self.games = state["games"]
        self.scores.extend(state["scores"])
        self.lengths.extend(state["lengths"])
        saved_on = sampled_on(state)
        if saved_on == self.device.type:
            self.sample_generator.set_state(state["sample_generator"])
        else:
            # A CPU and a CUDA generator share no state (ppo/checkpoint.py), and the run could not go
            # on bit for bit anyway: the other device's kernels round differently. So this device
            # draws from a new stream, seeded by the run's seed and the update: a resume made twice
            # from one checkpoint still makes one run.
            self.sample_generator.manual_seed(resumed_sampling_seed(self.torch_seed, self.update))
            self.on_event(f"the checkpoint's actions were sampled on {saved_on}; this resume samples them on "
                          f"{self.device.type} from a new random stream (seeded by the run's seed and update "
                          f"{self.update:,}): the run goes on, but not bit for bit as it would on {saved_on}")
        self.shuffle_rng.bit_generator.state = state["shuffle_rng"]
        self.pool.restarts = state.get("worker_restarts", 0)  # the next replacement's seeds follow on
        self.nonfinite_skipped = state.get("nonfinite_skipped", 0)
        env_states = state.get("env_states")
        if env_states is not None:
            # A replacement worker takes the saved emulator states as well: the resume stays exact.
            self.pool.with_restarts(lambda: self.pool.set_state(env_states), tick=self.update)
        else:
            self.reset_envs()
