"""The benchmark's measurements, each run alone: ale-py's vector env, the project's pool and the
trainer's phases on it, and the network by itself; with the timing, /proc memory and scheduler readings they use."""

from __future__ import annotations

import math
import os
import re
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from configs.ppo import LIVE_RANGES, PPOConfig
from experiments.timing import timed_rate, warmup_seconds
from game.atari import gym_id
from game.vector import EnvPool, game_specs, make_pool
from ppo.memory import keep_freed_memory
from ppo.model import ActorCritic
from ppo.rollout import Batch
from ppo.schedule import annealed
from ppo.seeding import derive_seeds
from ppo.trainer import Trainer
from ppo.update import Forward, minibatch_step


def _sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


# ---- processes: memory and scheduler accounts (/proc, and psutil where it reports them) --------

def status_kb(pid: int | str, field: str) -> int:
    """A `Vm*` line of /proc/PID/status in kB; 0 when the process or the line is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _pss_kb(pid: int) -> int:
    """Proportional set size (shared pages split between their users); 0 if unavailable."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss) // 1024
    except (psutil.Error, AttributeError):  # gone, or no PSS on this system
        return 0


def _parent_pid(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:  # gone
        return None


def scheduler_ns(pid: int) -> tuple[int, int] | None:
    """(time on a core, time runnable but waiting for one) of `pid` in ns, summed over its threads
    (/proc/PID/task/*/schedstat, the scheduler's own accounts); None where the kernel keeps no
    such account or the process is gone. A thread that ended before the call is not counted.
    Read here, not through psutil: its CPU times have no waiting time, and count in clock ticks
    (10 ms), coarser than a worker's time per step."""
    on_core = waiting = read = 0
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for thread in threads:
        try:
            fields = (thread / "schedstat").read_text().split()
            on_core, waiting, read = on_core + int(fields[0]), waiting + int(fields[1]), read + 1
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile, or no schedstat
            continue
    try:
        alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # a zombie's account is final, not running
    except psutil.Error:
        alive = False
    return (on_core, waiting) if read and alive else None


def worker_memory(pool: EnvPool, backend: str = "local") -> dict[str, float]:
    """Peak (VmHWM) and current (VmRSS) resident sets, in MB, summed over the workers and the
    forkserver that forked them (their parent). RSS counts shared library pages once per
    process, so the PSS sum is given too. Ray actors count alone (their parent is Ray's raylet;
    on a cluster, only the actors on this machine are found)."""
    pids = set(pool.worker_pids())
    if backend == "local":
        pids |= {p for p in map(_parent_pid, list(pids)) if p and p != os.getpid() and p != 1}
    mb = 1 / 1024
    return {
        "workers_peak_rss_mb": sum(status_kb(p, "VmHWM") for p in pids) * mb,
        "workers_rss_mb": sum(status_kb(p, "VmRSS") for p in pids) * mb,
        "workers_pss_mb": sum(_pss_kb(p) for p in pids) * mb,
        "worker_processes": len(pids),
    }


# ---- the measurements --------------------------------------------------------------------------

def ale_rom_name(game: str) -> str:
    """`Breakout`, `ALE/Breakout-v5` → `breakout`; `MsPacman` → `ms_pacman` (ale-py's ROM names)."""
    name = gym_id(game).split("/")[-1].split("-v")[0]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def measure_ale_vector(config: PPOConfig, duration: float) -> dict[str, Any]:
    """ale-py's threaded C++ vector env with the project's preprocessing, random actions."""
    from ale_py.vector_env import AtariVectorEnv

    threads = os.cpu_count() or 1
    settings: dict[str, Any] = {
        "num_threads": threads, "frameskip": config.frame_skip, "maxpool": True, "img_height": 84,
        "img_width": 84, "grayscale": True, "stack_num": config.frame_stack, "noop_max": config.noop_max,
        "repeat_action_probability": 0.0, "full_action_space": False,
        # life_loss_info = "terminal on a lost life, the game goes on": the project's
        # terminal_on_life_loss. (ale-py's episodic_life would restart the game at each lost life.)
        "episodic_life": False, "life_loss_info": config.terminal_on_life_loss,
        "reward_clipping": config.clip_rewards, "use_fire_reset": config.fire_on_reset,
        "max_num_frames_per_episode": config.max_episode_frames,
    }
    env = AtariVectorEnv(ale_rom_name(config.game), config.n_envs, **settings)
    try:
        env.reset(seed=config.seed)
        n_actions = int(env.single_action_space.n)  # type: ignore[attr-defined]  # a Discrete space
        rng = np.random.default_rng(config.seed)
        actions = rng.integers(0, n_actions, (256, config.n_envs), dtype=np.int32)
        t = [0]

        def step() -> None:
            env.step(actions[t[0] % len(actions)])
            t[0] += 1

        timing = timed_rate(step, config.n_envs, duration, warmup_seconds(duration))
    finally:
        env.close()
    return {"ale_vector_sps": timing["rate"], "ale_vector_threads": threads, "ale_vector_settings": settings}


def measure_pool_and_trainer(config: PPOConfig, device: torch.device, duration: float,
                             warmup_updates: int) -> dict[str, Any]:
    """The worker pool alone (random actions), then the trainer's phases on it; the pool is
    closed on return, whatever happens."""
    seeds = derive_seeds(config.seed, config.n_envs)
    out: dict[str, Any] = {}
    warmup = warmup_seconds(duration)
    started = time.perf_counter()
    with make_pool(config, game_specs(config, seeds.env_seeds)) as pool:
        out["pool_start_s"] = time.perf_counter() - started
        out["n_actions"] = pool.n_actions
        info = pool.worker_info()
        out["workers_import_torch"] = any(i["torch_imported"] for i in info)

        # -- the pool alone: random actions, no network
        pool.reset()
        rng = np.random.default_rng(config.seed)
        actions = rng.integers(0, pool.n_actions, (256, pool.n_envs), dtype=np.int32)
        t = [0]

        def step() -> None:
            pool.step(actions[t[0] % len(actions)])
            t[0] += 1

        out["pool_env_sps"] = timed_rate(step, pool.n_envs, duration, warmup)["rate"]
        # One Pipe round trip to every worker (a tiny INFO request): the per-step messaging cost.
        roundtrip = timed_rate(pool.worker_info, 1, min(duration, 1.0), min(warmup, 0.2))
        out["pool_roundtrip_us"] = 1e6 / roundtrip["rate"]

        # -- the trainer, as experiments/breakout.py runs it
        torch.set_num_threads(config.torch_threads or torch.get_num_threads())
        out["trainer_torch_threads"] = torch.get_num_threads()
        trainer = Trainer(config, pool, seeds, device)
        pool.reset()
        size = trainer.rollout.size
        sync = _sync(device)

        def whole_update() -> None:
            trainer.update = 0  # keep the schedule at its first update (no annealing to 0 or below)
            trainer.iteration()

        for _ in range(warmup_updates):
            whole_update()
        hp = trainer.schedule()
        pids = [os.getpid(), *pool.worker_pids()]
        started, before = time.perf_counter(), [scheduler_ns(pid) for pid in pids]
        sampling = timed_rate(trainer.collect, size, duration, 0.0, sync=sync)
        after, wall = [scheduler_ns(pid) for pid in pids], time.perf_counter() - started
        out["sample_sps"] = sampling["rate"]
        # timed_rate's untimed first call is inside `wall` too: every step of every collect counts.
        out.update(sampling_breakdown(before, after, wall, (int(sampling["calls"]) + 1) * config.worker_steps))
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        updating = timed_rate(lambda: trainer.optimize(hp), size, duration, 0.0, sync=sync)
        out["update_sps"] = updating["rate"]
        # Pages the kernel had to hand out (and zero) while updating, per update (its untimed first
        # call counted too): near 0 when freed tensors are reused (ppo/memory.py).
        out["update_page_faults"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / (updating["calls"] + 1)
        loop = timed_rate(whole_update, size, duration, 0.0, min_calls=2, sync=sync)
        out["loop_sps"] = loop["rate"]
        out["loop_updates_timed"] = loop["calls"]
        out.update(worker_memory(pool, config.backend))  # while the workers are still alive
    return out


def sampling_breakdown(before: list[tuple[int, int] | None], after: list[tuple[int, int] | None], wall_s: float,
                       steps: int) -> dict[str, float]:
    """Where a step of all the games goes while sampling, in ms per step: its wall time; the trainer's
    time on a core and waiting for one (the first entries); a worker's, averaged over the workers
    (the rest). From the scheduler's accounts (`scheduler_ns`) taken within `wall_s`,
    so the times on a core add up to at most cores × wall. Empty where an account is missing (not
    Linux, or a Ray actor on another machine)."""
    if any(b is None or a is None for b, a in zip(before, after, strict=True)) or len(before) < 2:
        return {}
    per_step = [((a[0] - b[0]) / steps / 1e6, (a[1] - b[1]) / steps / 1e6)  # type: ignore[index]
                for b, a in zip(before, after, strict=True)]
    workers = per_step[1:]
    return {"sample_step_ms": wall_s / steps * 1e3,
            "sample_trainer_on_core_ms": per_step[0][0], "sample_trainer_waiting_ms": per_step[0][1],
            "sample_worker_on_core_ms": sum(w[0] for w in workers) / len(workers),
            "sample_worker_waiting_ms": sum(w[1] for w in workers) / len(workers)}


def _network_steps(config: PPOConfig, n_actions: int, device: torch.device, frames: np.ndarray,
                   memory_format: torch.memory_format, generator: torch.Generator, precision: str = "fp32",
                   compiled: bool = False) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one inference step at batch n_envs, one training step at the minibatch size) on a fresh model;
    `compiled`: its forward through `torch.compile` (inductor; backward through AOTAutograd). The
    training step is the trainer's own (`ppo.update.minibatch_step`), on random targets."""
    torch.manual_seed(config.seed)
    model = ActorCritic(n_actions, config.frame_stack, precision=precision)
    model = model.to(device, memory_format=memory_format)  # type: ignore[call-overload]
    net: Forward = torch.compile(model, dynamic=False) if compiled else model
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate, eps=config.adam_eps)
    mb = config.minibatch_size
    x = torch.randint(0, 256, (mb, *frames.shape[1:]), dtype=torch.uint8, generator=generator)
    x = x.to(device).contiguous(memory_format=memory_format)
    actions = torch.randint(0, n_actions, (mb,), generator=generator).to(device)
    targets = torch.randn(mb, generator=generator).to(device)
    old_log_probs = torch.full((mb,), -math.log(n_actions), device=device)  # a uniform sampling policy
    minibatch = Batch(x, actions, old_log_probs, torch.zeros(mb, device=device), targets, targets)
    settings = annealed({k: getattr(config, k) for k in LIVE_RANGES}, config, update=0)  # the first update's

    def infer() -> None:
        observations = torch.from_numpy(frames).to(device).contiguous(memory_format=memory_format)
        with torch.inference_mode():
            logits, values = net(observations)
        logits.cpu(), values.cpu()  # a rollout step needs them on the host

    def train() -> None:
        minibatch_step(net, optimizer, minibatch, settings, config.normalize_advantages, config.max_grad_norm)

    return infer, train


def measure_network(config: PPOConfig, n_actions: int, device: torch.device, duration: float,
                    precision: str = "fp32", compiled: bool = False) -> dict[str, Any]:
    """Eager ActorCritic alone, all cores: inference at n_envs, training at the minibatch size; in
    fp32 each in contiguous and channels-last memory format, the best of the two reported; in another
    `precision` (bf16, bf16-emulated) also in it, channels-last (the layout oneDNN's bf16 kernels use).
    `compiled`: the same two steps at the run's precision through `torch.compile` as well, for
    comparison only (the trainer runs eager); `compile_s` is the time of the first calls."""
    torch.set_num_threads(os.cpu_count() or 1)
    keep_freed_memory()  # as the trainer does: the bound is the network at its best
    sync = _sync(device)
    warmup = warmup_seconds(duration)
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.frame_stack, 84, 84)
    frames = torch.randint(0, 256, (config.n_envs, *shape), dtype=torch.uint8, generator=generator).numpy()
    out: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    for layout, memory_format in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
        infer, train = _network_steps(config, n_actions, device, frames, memory_format, generator)
        out[f"infer_sps_{layout}"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
        out[f"train_sps_{layout}"] = timed_rate(train, config.minibatch_size, duration, warmup, sync=sync)["rate"]
    out["infer_sps_fp32"] = max(out["infer_sps_contiguous"], out["infer_sps_channels_last"])
    out["train_sps_fp32"] = max(out["train_sps_contiguous"], out["train_sps_channels_last"])
    out["infer_memory_format"] = max(("contiguous", "channels_last"), key=lambda k: out[f"infer_sps_{k}"])
    out["train_memory_format"] = max(("contiguous", "channels_last"), key=lambda k: out[f"train_sps_{k}"])
    fmt = torch.channels_last if out["infer_memory_format"] == "channels_last" else torch.contiguous_format
    if precision != "fp32":
        infer, train = _network_steps(config, n_actions, device, frames, torch.channels_last, generator, precision)
        out["infer_sps_bf16"] = out["infer_sps"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
        out["train_sps_bf16"] = out["train_sps"] = timed_rate(train, config.minibatch_size, duration, warmup, sync=sync)["rate"]
        out["infer_memory_format"] = out["train_memory_format"] = "channels_last"
        fmt = torch.channels_last
    else:
        out["infer_sps"], out["train_sps"] = out["infer_sps_fp32"], out["train_sps_fp32"]
    if compiled:
        infer, train = _network_steps(config, n_actions, device, frames, fmt, generator, precision, compiled=True)
        first = time.perf_counter()
        for _ in range(2):  # the first call compiles; the second must not (a recompile would show here)
            infer(), train()
        out["compile_s"] = time.perf_counter() - first
        out["infer_sps_compiled"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
        out["train_sps_compiled"] = timed_rate(train, config.minibatch_size, duration, warmup, sync=sync)["rate"]
    # Inference on one thread: what sampling gets if it leaves the other cores to the workers.
    torch.set_num_threads(1)
    infer, _ = _network_steps(config, n_actions, device, frames, fmt, generator, precision)
    out["infer_sps_1_thread"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
    torch.set_num_threads(out["torch_threads"])
    return out
