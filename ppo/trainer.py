"""One PPO update = collect a rollout from every env, then optimise the clipped objective on it.

Framework-free: labml bookkeeping lives in `experiments/`, so this is testable on its own. The
trainer owns the learner's whole state (model, Adam, random streams, counters, game records) and
is the one that saves it to a `Checkpoint` and restores it from one.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from configs.ppo import LIVE_RANGES, LiveValues, PPOConfig
from game.vector import EnvPool, PoolError, StepBatch, WorkerKeepsFailing
from ppo.checkpoint import Checkpoint
from ppo.devices import resolve_precision
from ppo.losses import explained_variance, log_probs_of
from ppo.memory import keep_freed_memory
from ppo.model import ActorCritic, sample_actions
from ppo.precision import arithmetic_at
from ppo.records import GameRecord, GameRecords
from ppo.resume_point import check_fits, sampled_on, thawed
from ppo.rollout import Batch, Rollout, acting_groups
from ppo.schedule import IterationSettings, annealed, check_settings
from ppo.seeding import Seeds, resumed_sampling_seed
from ppo.threads import torch_threads
from ppo.update import minibatch_step

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
                 live_values: Callable[[], LiveValues] | None = None, on_event: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.pool = pool
        self.device = device
        # Every minibatch allocates the same large tensors: keep freed ones for reuse, or each step
        # takes its memory from the kernel again as zeroed pages (ppo/memory.py).
        keep_freed_memory()
        # Where the live hyperparameters come from: labml's dynamic values in a run, the config here.
        self.live_values = live_values or (lambda: {k: getattr(config, k) for k in LIVE_RANGES})
        # The live values last applied: what a checkpoint saves as their bases.
        self.live_in_use: LiveValues = {k: getattr(config, k) for k in LIVE_RANGES}
        # Asked between minibatches; True abandons the update in progress (`UpdateAbandoned`). The run
        # sets it to "a stop was requested", so Ctrl-C/SIGTERM never waits for a whole update.
        self.should_stop: Callable[[], bool] | None = None
        # Set before initialising: orthogonal init runs a QR whose last bits depend on the thread
        # count, and the same seed must give the same model whatever ran in this process before.
        self.train_threads = config.torch_threads or os.cpu_count() or 1
        # A batch of n_envs observations is too small to split over threads (see ppo/threads.py).
        self.sample_threads = config.sample_threads if device.type == "cpu" else self.train_threads
        # The run's precision; what the network computes each update in follows from it (`arithmetic_at`).
        self.precision = resolve_precision(config.precision, device)
        with torch_threads(self.train_threads):
            torch.manual_seed(seeds.torch_seed)
            self.model = ActorCritic(pool.n_actions, config.frame_stack, config.channels_last,
                                     arithmetic_at(self.precision, 0, config.n_updates)).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.learning_rate, eps=config.adam_eps)
        self.torch_seed = seeds.torch_seed
        self.sample_generator = torch.Generator(device=device)
        self.sample_generator.manual_seed(seeds.torch_seed)
        self.shuffle_rng = np.random.default_rng(seeds.numpy_seed)
        self.rollout = Rollout(pool.n_envs, config.worker_steps, pool.observations.shape[1:])
        self.update = 0  # updates completed
        self.env_steps = 0  # agent steps taken, over all envs
        self.records = GameRecords(config.score_window)
        self.nonfinite_skipped = 0  # minibatches skipped for a NaN/inf loss (skip_nonfinite)
        # Where the trainer's events go (a worker replaced, a live value refused): the run's log.
        self.on_event: Callable[[str], None] = on_event or print
        pool.on_restart = self.on_event

    # -- one iteration, top to bottom ------------------------------------------------------------

    def iteration(self, settings: IterationSettings | None = None, *, sample: bool = True) -> dict[str, float]:
        """One PPO iteration: sample a rollout with the current policy, then improve the policy on it.
        `sample=False` (`optimize`) runs the second half alone, on the rollout `collect` filled, and
        counts no update."""
        # Read once: whatever the dashboard sends meanwhile, the whole iteration uses these values.
        settings = self.schedule() if settings is None else settings
        check_settings(settings)  # whoever made them, settings outside the live ranges never reach the model
        config, rollout = self.config, self.rollout
        # One arithmetic for the whole update, sampling included: a policy ratio starts at exactly 1.
        self.model.precision = arithmetic_at(self.precision, self.update, config.n_updates)
        started = time.perf_counter()
        if sample:  # worker_steps × n_envs transitions; a failed worker is replaced and the rollout starts over
            self.collect()
        # V(s_T) of the states after the last step: the trajectories the rollout cut bootstrap from it.
        rollout.last_values[:] = self._values(self.pool.observations)
        sampled = time.perf_counter()
        # NaN/inf anywhere, or a stop between two minibatches: the learner is put back as it was.
        with self._all_or_nothing(), torch_threads(self.train_threads):
            # GAE(γ, λ): advantages and returns, then the whole rollout on the device as one flat batch.
            batch = rollout.batch(config.gamma, config.gae_lambda, self.device, self.model.channels_last)
            for group in self.optimizer.param_groups:
                group["lr"] = settings.learning_rate
            stats: list[dict[str, float]] = []
            epochs_done = 0
            for _ in range(settings.epochs):
                # A new shuffle each epoch: each minibatch mixes steps of many games and times.
                order = torch.from_numpy(self.shuffle_rng.permutation(rollout.size)).to(self.device)
                epoch: list[dict[str, float]] = []
                for minibatch in batch.minibatches(order, config.minibatch_size):
                    self._stop_if_asked()  # a stop never waits for a whole update
                    if (step := self._minibatch_update(minibatch, settings)) is not None:  # None: NaN skipped
                        epoch.append(step)
                stats += epoch
                epochs_done += 1
                if config.target_kl is not None and epoch and float(np.mean([s["approx_kl"] for s in epoch])) > config.target_kl:
                    break  # the policy moved too far from the one that sampled: stop early
            metrics = {k: sum(s[k] for s in stats) / max(len(stats), 1) for k in MINIBATCH_METRICS}
            metrics["explained_variance"] = explained_variance(batch.values, batch.returns)
        done = time.perf_counter()
        metrics.update(epochs_done=epochs_done, learning_rate=settings.learning_rate, clip_range=settings.clip_range,
                       update_sps=rollout.size / (done - sampled), worker_restarts=self.pool.restarts,
                       nonfinite_skipped=self.nonfinite_skipped)
        if sample:
            self.update += 1
            metrics.update(sps=rollout.size / (done - started), sample_sps=rollout.size / (sampled - started))
        if settings.value_clip_range is not None:  # none without a value clip
            metrics["value_clip_range"] = settings.value_clip_range
        if (score_mean := self.records.score_mean()) is not None:
            metrics["score_mean_100"] = score_mean
            metrics["game_length_mean_100"] = float(np.mean(self.records.lengths))
        return metrics

    # -- what the iteration's lines stand for ------------------------------------------------------

    def _collect_once(self) -> None:
        """Fill the rollout with worker_steps steps of every env, double-buffered: while one group of
        workers steps, the network chooses the other group's actions (`acting_groups`; with one group,
        the network and the envs take turns). Called by `pool.with_restarts`, which replaces a worker
        that dies, hangs or raises and calls it again: the rollout starts over from the envs' current
        states, so no transition straddles a replacement (games already finished still count)."""
        groups, steps = acting_groups(self.config), self.rollout.n_steps
        with torch_threads(self.sample_threads), self._drained_on_fault():
            for workers, envs in groups:
                self.pool.step_async(self._act(envs, 0), workers)
            for t in range(steps):
                for workers, envs in groups:
                    self._record(self.pool.step_wait(workers), envs, t)
                    if t + 1 < steps:
                        self.pool.step_async(self._act(envs, t + 1), workers)
        self.env_steps += self.rollout.size

    def _minibatch_update(self, minibatch: Batch, settings: IterationSettings) -> dict[str, float] | None:
        """One Adam step on the PPO loss; None when a NaN/inf was skipped (`skip_nonfinite`)."""
        step = minibatch_step(self.model, self.optimizer, minibatch, settings, self.config.normalize_advantages, self.config.max_grad_norm)
        if not step.finite:
            if self.config.skip_nonfinite:
                self.nonfinite_skipped += 1
                return None
            raise NonFiniteLoss(f"non-finite loss ({step.total}) or gradient norm ({step.grad_norm}); update not applied")
        return step.metrics

    def _act(self, envs: slice, t: int) -> np.ndarray:
        """Choose actions for `envs` at step t from their current observations; store them."""
        rollout = self.rollout
        observations = self.pool.observations[envs]
        rollout.observations[envs, t] = observations
        with torch.inference_mode():
            logits, values = self.model(torch.from_numpy(observations).to(self.device, non_blocking=True))
            actions = sample_actions(logits, self.sample_generator)
            log_probs = log_probs_of(logits, actions)
        actions_np = actions.cpu().numpy()
        rollout.actions[envs, t] = actions_np
        rollout.log_probs[envs, t] = log_probs.cpu().numpy()
        rollout.values[envs, t] = values.cpu().numpy()
        return actions_np

    @torch.inference_mode()
    def _values(self, observations: np.ndarray) -> np.ndarray:
        """V(s), with the sampling threads: the same bits the actions' values were computed with."""
        with torch_threads(self.sample_threads):
            return self.model(torch.from_numpy(observations).to(self.device))[1].cpu().numpy()

    def _record(self, step: StepBatch, envs: slice, t: int) -> None:
        """Store what `envs` got for their step t; count the games that ended in it."""
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
            self.records.add(GameRecord(env_step, self.update + 1, game.score, game.length, game.truncated))

    @contextlib.contextmanager
    def _drained_on_fault(self) -> Iterator[None]:
        """On a worker's fault the other group may still be stepping: its reply is read before a restart."""
        try:
            yield
        except PoolError:
            self.pool.drain()
            raise

    def _stop_if_asked(self) -> None:
        if self.should_stop is not None and self.should_stop():
            # Rolled back by _all_or_nothing: the update is applied whole or not at all.
            raise UpdateAbandoned(f"stop requested during update {self.update + 1}; that update was not applied")

    @contextlib.contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """The update as a whole, or (NaN/inf, a stop midway) the learner as it was before it."""
        before = self.snapshot()
        try:
            yield
            if not all(torch.isfinite(p).all() for p in self.model.parameters()):
                raise NonFiniteLoss("parameters became NaN/inf; update not applied")
        except (NonFiniteLoss, UpdateAbandoned):
            self.restore(before)
            raise

    # -- the iteration's halves alone, for experiments that time them or optimise one rollout ----------

    def collect(self) -> None:
        """Fill the rollout with the current policy, as `iteration` does (worker faults handled alike)."""
        self.pool.with_restarts(self._collect_once, tick=self.update)

    def optimize(self, settings: IterationSettings) -> dict[str, float]:
        """`iteration`'s second half with `settings` on the rollout `collect` filled: GAE, then the
        epochs of minibatch updates, applied whole or not at all (`NonFiniteLoss`, `UpdateAbandoned`)."""
        return self.iteration(settings, sample=False)

    # -- hyperparameters -------------------------------------------------------------------------

    def schedule(self) -> IterationSettings:
        """This iteration's hyperparameters: the live values now, annealed (checked by `iteration`)."""
        self.live_in_use = self.live_values()
        return annealed(self.live_in_use, self.config, self.update)

    # -- the learner's state ---------------------------------------------------------------------

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

    def reset_envs(self) -> None:
        """Start a new game in every env (a run's start)."""
        self.pool.with_restarts(self.pool.reset, tick=self.update)

    @property
    def worker_restarts(self) -> int:
        """Workers the pool replaced over the whole run (saved in checkpoints)."""
        return self.pool.restarts

    def state_dict(self, live_values: LiveValues) -> Checkpoint:
        """The learner's state now, with `live_values` as the live hyperparameters' bases."""
        try:
            # A worker found dead here is replaced (and counted) like one found dead while sampling.
            env_states = self.pool.with_restarts(self.pool.get_state, tick=self.update)
        except (PoolError, WorkerKeepsFailing):  # the learner is still saved; games start afresh
            env_states = None
        records = self.records
        return Checkpoint(
            config=self.config.to_dict(), model=self.model.state_dict(), optimizer=self.optimizer.state_dict(),
            n_actions=self.pool.n_actions, update=self.update, env_steps=self.env_steps, games=records.games,
            scores=list(records.scores), lengths=list(records.lengths), live_values=live_values,
            sample_generator=self.sample_generator.get_state(), sample_generator_device=self.device.type,
            shuffle_rng=self.shuffle_rng.bit_generator.state, env_states=env_states,
            worker_restarts=self.pool.restarts, nonfinite_skipped=self.nonfinite_skipped,
        )

    def load_state_dict(self, state: Checkpoint) -> None:
        """Restore a checkpoint (a resume point's, read-only); `CheckpointError` if it belongs to another
        game or model. The parameters are copied into the model; Adam's moments, which the optimizer
        keeps as given and steps in place, become the trainer's own (`thawed`)."""
        check_fits(state, self.pool.n_actions, self.config.frame_stack, self.config.game, into=self.model)
        self.optimizer.load_state_dict(thawed(state.optimizer))
        self.update = state.update
        self.env_steps = state.env_steps
        self.records.restore(state.games, state.scores, state.lengths)
        saved_on = sampled_on(state)
        if saved_on == self.device.type:
            self.sample_generator.set_state(state.sample_generator)
        else:
            # A CPU and a CUDA generator share no state (ppo/resume_point.py), and the run could not go
            # on bit for bit anyway: the other device's kernels round differently. So this device
            # draws from a new stream, seeded by the run's seed and the update: a resume made twice
            # from one checkpoint still makes one run.
            self.sample_generator.manual_seed(resumed_sampling_seed(self.torch_seed, self.update))
            self.on_event(f"the checkpoint's actions were sampled on {saved_on}; this resume samples them on "
                          f"{self.device.type} from a new random stream (seeded by the run's seed and update "
                          f"{self.update:,}): the run goes on, but not bit for bit as it would on {saved_on}")
        self.shuffle_rng.bit_generator.state = state.shuffle_rng
        self.pool.restarts = state.worker_restarts  # the next replacement's seeds follow on
        self.nonfinite_skipped = state.nonfinite_skipped
        env_states = thawed(state.env_states)  # plain dicts and lists: the workers import nothing of ours
        if env_states is not None:
            # A replacement worker takes the saved emulator states as well: the resume stays exact.
            self.pool.with_restarts(lambda: self.pool.set_state(env_states), tick=self.update)
        else:
            self.reset_envs()

    def rewind(self, boundary: Checkpoint) -> Checkpoint:
        """After an abandoned update (its model and Adam already rolled back by `optimize`): the
        counters and game records back to `boundary`, so the summary and games.csv match it; returns
        `boundary` with the rolled-back model and Adam tensors in place of its own (those were stepped)."""
        self.update, self.env_steps = boundary.update, boundary.env_steps
        self.records.restore(boundary.games, boundary.scores, boundary.lengths, after_update=boundary.update)
        return dataclasses.replace(boundary, model=self.model.state_dict(), optimizer=self.optimizer.state_dict())

