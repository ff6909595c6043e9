"""How fast is training, and how far from what this machine can do? `python -m experiments.benchmark --help`.

Takes the experiment's own hyperparameter overrides (`--n-workers`, `--envs-per-worker`,
`--worker-steps`, `--epochs`, `--minibatches`, `--device`, …) plus `--duration` (seconds per
measurement) and `--warmup-updates`, and measures, in agent steps (samples) per second:

* `ale_vector_sps`  ale-py's C++ `AtariVectorEnv`, same envs and preprocessing, one thread per core:
                    the fastest Breakout stepping this machine can do;
* `pool_env_sps`    the project's pool stepping random actions, no network: `PipePool`, or `RayPool`
                    with `--backend ray` (a private local Ray instance, or `--ray-address`);
* `sample_sps`, `update_sps`, `loop_sps`
                    `Trainer.collect`, `Trainer.optimize`, whole `Trainer.iteration`s, with the real pool;
* `infer_sps`       eager `ActorCritic` forward at the rollout batch (n_envs), all cores, at the
                    loop's `--precision` (`infer_sps_fp32`: in fp32, the best memory format);
* `train_sps`       forward + backward + Adam at the minibatch size, likewise (`train_sps_fp32`);
* `bound_sps`       the loop's limit from those rates (see `bound_sps()`), and the loop's fraction
                    of it; `fp32_bound_sps` the same limit from the fp32 rates, which a bf16 loop
                    may exceed (`loop_fraction_of_fp32_bound` > 1).

The games are grouped into worker processes as a plain training run groups them on this machine
(by the usable cores, `configs.ppo.grouped_unless_chosen`) unless `--n-workers`/`--envs-per-worker`
say otherwise, so that the default measures the default run.

Measurements run one after another, never overlapping: the vector env is closed before the pool
starts, and the pool is closed before the network-only numbers. A readable table goes to stdout,
then, as the last line, one JSON object with every number.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch
from torch import nn

from configs.cli import OneLineParser, fail, parse_config
from configs.ppo import PPOConfig, grouped_unless_chosen
from experiments.run import process_table
from game.atari import canonical_game, gym_id
from game.vector import EnvPool, game_specs, make_pool
from ppo.devices import machine_fingerprint, precision_of, resolve_device, resolve_precision
from ppo.losses import ppo_loss
from ppo.model import ActorCritic
from ppo.seeding import derive_seeds
from ppo.trainer import Trainer

PROG = "python -m experiments.benchmark"

# Every key the JSON line always has (tests check them).
RATE_KEYS = ("pool_env_sps", "ale_vector_sps", "infer_sps", "train_sps", "sample_sps", "update_sps", "loop_sps",
             "bound_sps", "infer_sps_fp32", "train_sps_fp32", "fp32_bound_sps")
JSON_KEYS = (*RATE_KEYS, "loop_fraction_of_bound", "loop_fraction_of_fp32_bound", "precision", "pool_fraction_of_ale",
             "device", "device_name", "machine", "torch_threads",
             "trainer_torch_threads", "workers_import_torch", "trainer_peak_rss_mb", "trainer_rss_mb",
             "workers_peak_rss_mb", "workers_rss_mb", "date", "config", "backend")


# ---- the bound ---------------------------------------------------------------------------------

def bound_sps(ale_vector_sps: float, infer_sps: float, train_sps: float, epochs: int, device_type: str) -> float:
    """The loop's limit in agent steps/s, from the component rates.

    Every agent step costs one env step, one inference sample and `epochs` training samples. On
    CPU, env and network share the cores, so the costs add; with a GPU, stepping (CPU) and
    inference (GPU) could overlap, and only the slower of the two counts.
    """
    env_s, infer_s, train_s = 1 / ale_vector_sps, 1 / infer_sps, epochs / train_sps
    sample_s = env_s + infer_s if device_type == "cpu" else max(env_s, infer_s)
    return 1 / (sample_s + train_s)


# ---- timing ------------------------------------------------------------------------------------

def timed_rate(fn: Callable[[], Any], units_per_call: float, duration: float, warmup_s: float,
               min_calls: int = 1, sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Call `fn` for `warmup_s` (at least once), then for `duration` seconds (at least
    `min_calls` times) timed with `perf_counter`; returns units/s over the timed calls."""
    start = time.perf_counter()
    while True:
        fn()
        sync()
        if time.perf_counter() - start >= warmup_s:
            break
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        sync()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= duration and calls >= min_calls:
            break
    return {"rate": calls * units_per_call / elapsed, "calls": calls, "seconds": elapsed}


def warmup_seconds(duration: float) -> float:
    return min(2.0, 0.25 * duration)


def _sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


# ---- memory (from /proc) -----------------------------------------------------------------------

def _status_kb(pid: int | str, field: str) -> int:
    """A `Vm*` line of /proc/PID/status in kB; 0 when the process or the line is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _pss_kb(pid: int | str) -> int:
    """Proportional set size (shared pages split between their users); 0 if unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def worker_memory(pool: EnvPool, backend: str = "local") -> dict[str, float]:
    """Peak (VmHWM) and current (VmRSS) resident sets, in MB, summed over the workers and the
    forkserver that forked them (their parent). RSS counts shared library pages once per
    process, so the PSS sum is given too. Ray actors count alone (their parent is Ray's raylet;
    on a cluster, only the actors on this machine are found)."""
    pids = set(pool.worker_pids())
    if backend == "local":
        pids |= {p for p in (process_table.parent_pid(pid) for pid in list(pids)) if p and p != os.getpid() and p != 1}
    mb = 1 / 1024
    return {
        "workers_peak_rss_mb": sum(_status_kb(p, "VmHWM") for p in pids) * mb,
        "workers_rss_mb": sum(_status_kb(p, "VmRSS") for p in pids) * mb,
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
        out["sample_sps"] = timed_rate(trainer.collect, size, duration, 0.0, sync=sync)["rate"]
        out["update_sps"] = timed_rate(lambda: trainer.optimize(hp), size, duration, 0.0, sync=sync)["rate"]
        loop = timed_rate(whole_update, size, duration, 0.0, min_calls=2, sync=sync)
        out["loop_sps"] = loop["rate"]
        out["loop_updates_timed"] = loop["calls"]
        out.update(worker_memory(pool, config.backend))  # while the workers are still alive
    return out


def _network_steps(config: PPOConfig, n_actions: int, device: torch.device, frames: np.ndarray,
                   memory_format: torch.memory_format, generator: torch.Generator, compute_dtype: torch.dtype | None = None,
                   compiled: bool = False) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one inference step at batch n_envs, one training step at the minibatch size) on a fresh model;
    `compiled`: its forward through `torch.compile` (inductor; backward through AOTAutograd)."""
    torch.manual_seed(config.seed)
    model = ActorCritic(n_actions, config.frame_stack, compute_dtype=compute_dtype)
    model = model.to(device, memory_format=memory_format)  # type: ignore[call-overload]
    net: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] = (
        torch.compile(model, dynamic=False) if compiled else model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate, eps=config.adam_eps)
    mb = config.minibatch_size
    x = torch.randint(0, 256, (mb, *frames.shape[1:]), dtype=torch.uint8, generator=generator)
    x = x.to(device).contiguous(memory_format=memory_format)
    actions = torch.randint(0, n_actions, (mb,), generator=generator).to(device)
    targets = torch.randn(mb, generator=generator).to(device)
    old_log_probs = torch.full((mb,), -math.log(n_actions), device=device)  # a uniform sampling policy
    old_values = torch.zeros(mb, device=device)

    def infer() -> None:
        observations = torch.from_numpy(frames).to(device).contiguous(memory_format=memory_format)
        with torch.inference_mode():
            logits, values = net(observations)
        logits.cpu(), values.cpu()  # a rollout step needs them on the host

    def train() -> None:
        logits, values = net(x)  # the trainer's own loss, on random targets
        loss = ppo_loss(logits, values, actions, old_log_probs, old_values, targets, targets, clip_range=config.clip_range,
                        value_clip_range=config.value_clip_for(config.clip_range), value_coef=config.value_coef, entropy_coef=config.entropy_coef,
                        normalize_advantages=True)
        optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()

    return infer, train


def measure_network(config: PPOConfig, n_actions: int, device: torch.device, duration: float,
                    compute_dtype: torch.dtype | None = None, compiled: bool = False) -> dict[str, Any]:
    """Eager ActorCritic alone, all cores: inference at n_envs, training at the minibatch size; in
    fp32 each in contiguous and channels-last memory format, the best of the two reported; with a
    `compute_dtype` (bf16) also in it, channels-last (the layout oneDNN's bf16 kernels use).
    `compiled`: the same two steps at the run's precision through `torch.compile` as well, for
    comparison only (the trainer runs eager); `compile_s` is the time of the first calls."""
    torch.set_num_threads(os.cpu_count() or 1)
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
    if compute_dtype is not None:
        infer, train = _network_steps(config, n_actions, device, frames, torch.channels_last, generator, compute_dtype)
        out["infer_sps_bf16"] = out["infer_sps"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
        out["train_sps_bf16"] = out["train_sps"] = timed_rate(train, config.minibatch_size, duration, warmup, sync=sync)["rate"]
        out["infer_memory_format"] = out["train_memory_format"] = "channels_last"
        fmt = torch.channels_last
    else:
        out["infer_sps"], out["train_sps"] = out["infer_sps_fp32"], out["train_sps_fp32"]
    if compiled:
        infer, train = _network_steps(config, n_actions, device, frames, fmt, generator, compute_dtype, compiled=True)
        first = time.perf_counter()
        for _ in range(2):  # the first call compiles; the second must not (a recompile would show here)
            infer(), train()
        out["compile_s"] = time.perf_counter() - first
        out["infer_sps_compiled"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
        out["train_sps_compiled"] = timed_rate(train, config.minibatch_size, duration, warmup, sync=sync)["rate"]
    # Inference on one thread: what sampling gets if it leaves the other cores to the workers.
    torch.set_num_threads(1)
    infer, _ = _network_steps(config, n_actions, device, frames, fmt, generator, compute_dtype)
    out["infer_sps_1_thread"] = timed_rate(infer, config.n_envs, duration, warmup, sync=sync)["rate"]
    torch.set_num_threads(out["torch_threads"])
    return out


# ---- the command -------------------------------------------------------------------------------

def run_benchmark(config: PPOConfig, duration: float, warmup_updates: int,
                  log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
                  compiled: bool = False) -> dict[str, Any]:
    device = resolve_device(config.device)
    compute_dtype = resolve_precision(config.precision, device)
    started = time.perf_counter()
    result: dict[str, Any] = {}
    log(f"[1/3] ale-py AtariVectorEnv, {config.n_envs} envs, {os.cpu_count()} threads …")
    result.update(measure_ale_vector(config, duration))
    log(f"[2/3] {_pool_name(config)} ({config.n_workers} workers × {config.envs_per_worker} envs) and the trainer on {device} …")
    result.update(measure_pool_and_trainer(config, device, duration, warmup_updates))
    log("[3/3] network alone (pool closed)" + (", eager then torch.compile" if compiled else "") + " …")
    result.update(measure_network(config, result["n_actions"], device, duration, compute_dtype, compiled))

    result["precision"] = precision_of(compute_dtype)
    result["bound_sps"] = bound_sps(result["ale_vector_sps"], result["infer_sps"], result["train_sps"],
                                    config.epochs, device.type)
    result["fp32_bound_sps"] = bound_sps(result["ale_vector_sps"], result["infer_sps_fp32"], result["train_sps_fp32"],
                                         config.epochs, device.type)
    result["loop_fraction_of_bound"] = result["loop_sps"] / result["bound_sps"]
    result["loop_fraction_of_fp32_bound"] = result["loop_sps"] / result["fp32_bound_sps"]
    result["pool_fraction_of_ale"] = result["pool_env_sps"] / result["ale_vector_sps"]
    result["trainer_peak_rss_mb"] = _status_kb("self", "VmHWM") / 1024
    result["trainer_rss_mb"] = _status_kb("self", "VmRSS") / 1024
    machine = machine_fingerprint(device)
    result.update(
        device=str(device),
        # Rates hold for one machine: the CPU (with family/model/stepping, as a VM may give two
        # generations one name), torch's kernel set, the GPU and the versions, as a run records them.
        machine=machine,
        device_name=machine["device"] if device.type == "cuda" else machine["cpu"],
        cpu_count=os.cpu_count(),
        torch_version=torch.__version__,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=duration,
        warmup_updates=warmup_updates,
        benchmark_wall_s=time.perf_counter() - started,
        config={"game": config.game, "n_workers": config.n_workers, "envs_per_worker": config.envs_per_worker,
                "n_envs": config.n_envs, "worker_steps": config.worker_steps, "batch_size": config.batch_size,
                "epochs": config.epochs, "minibatches": config.minibatches, "minibatch_size": config.minibatch_size,
                "device": config.device, "torch_threads": config.torch_threads, "backend": config.backend,
                "precision": config.precision},
        backend=config.backend,
    )
    return result


def _pool_name(config: PPOConfig | dict[str, Any]) -> str:
    backend = config["backend"] if isinstance(config, dict) else config.backend
    return "RayPool" if backend == "ray" else "PipePool"


def format_table(r: dict[str, Any]) -> str:
    c = r["config"]
    rows = [
        ("ale_vector_sps", f"ale-py AtariVectorEnv, {c['n_envs']} envs, {r['ale_vector_threads']} threads"),
        ("pool_env_sps", f"{_pool_name(r['config'])} random actions, {c['n_workers']} workers × {c['envs_per_worker']} envs"),
        ("infer_sps_fp32", f"fp32 forward at batch {c['n_envs']}, {r['torch_threads']} threads (best layout)"),
        ("train_sps_fp32", f"fp32 fwd+bwd+Adam at minibatch {c['minibatch_size']} (best layout)"),
        ("infer_sps", f"{r['precision']} forward at batch {c['n_envs']}, {r['torch_threads']} threads ({r['infer_memory_format']})"),
        ("infer_sps_1_thread", f"{r['precision']} forward at batch {c['n_envs']}, 1 thread ({r['infer_memory_format']})"),
        ("train_sps", f"{r['precision']} fwd+bwd+Adam at minibatch {c['minibatch_size']} ({r['train_memory_format']})"),
        ("sample_sps", "Trainer.collect (rollout with inference)"),
        ("update_sps", f"Trainer.optimize ({c['epochs']} epochs × {c['minibatches']} minibatches)"),
        ("loop_sps", f"Trainer.iteration, {r['loop_updates_timed']} updates after {r['warmup_updates']} warm-up"),
        ("fp32_bound_sps", f"limit from ale/infer/train in fp32 on {r['device']}"),
        ("bound_sps", f"limit from ale/infer/train in {r['precision']} on {r['device']}"),
    ]
    if "train_sps_compiled" in r:  # --compile
        rows[7:7] = [("infer_sps_compiled", f"{r['precision']} forward at batch {c['n_envs']}, torch.compile"),
                     ("train_sps_compiled", f"{r['precision']} fwd+bwd+Adam at minibatch {c['minibatch_size']}, "
                                            f"torch.compile (compiled in {r['compile_s']:.0f} s)")]
    lines = [f"benchmark {r['date']}  device {r['device']}  cores {r['cpu_count']}  torch {r['torch_version']}",
             f"machine: {r['machine']['cpu']}, kernels {r['machine']['cpu_capability']}"
             + (f", GPU {r['machine']['device']}" if r["device"].startswith("cuda") else ""),
             f"config: {c['n_workers']} workers × {c['envs_per_worker']} envs, {c['worker_steps']} steps, "
             f"batch {c['batch_size']}, {c['epochs']} epochs × {c['minibatches']} minibatches, precision {r['precision']}",
             "", f"{'measure':<19}{'steps/s':>11}  what"]
    lines += [f"{key:<19}{r[key]:>11,.1f}  {what}" for key, what in rows]
    lines += [
        "",
        f"loop / bound      {r['loop_fraction_of_bound']:.1%}   (loop / fp32 bound {r['loop_fraction_of_fp32_bound']:.1%})",
        f"pool / ale-py     {r['pool_fraction_of_ale']:.1%}   ({'actor call' if r['backend'] == 'ray' else 'pipe'} round trip {r['pool_roundtrip_us']:.0f} µs)",
        f"memory (MB)       trainer peak {r['trainer_peak_rss_mb']:.0f}, now {r['trainer_rss_mb']:.0f}; "
        f"{'actors' if r['backend'] == 'ray' else 'workers+forkserver'} peak {r['workers_peak_rss_mb']:.0f} (PSS {r['workers_pss_mb']:.0f})",
        f"workers import torch: {r['workers_import_torch']}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    def extra(parser: OneLineParser) -> None:
        group = parser.add_argument_group("benchmark")
        group.add_argument("--duration", type=float, default=10.0, metavar="SECONDS",
                           help="seconds timed per measurement, after its warm-up (default: 10)")
        group.add_argument("--warmup-updates", type=int, default=1, metavar="N",
                           help="whole updates run before the trainer's phases are timed (default: 1)")
        group.add_argument("--compile", action="store_true",
                           help="also time the network through torch.compile at the run's precision "
                                "(infer_sps_compiled, train_sps_compiled; the trainer itself runs eager)")

    description = "Measure env, network and training-loop speed against this machine's limits."
    config, args, overrides = parse_config(argv, prog, description, extra, canonical_game)
    config = grouped_unless_chosen(config, overrides)  # what a plain training run here would run
    if not (math.isfinite(args.duration) and args.duration > 0):
        fail(f"--duration {args.duration}: expected a finite number > 0")
    if args.warmup_updates < 0:
        fail(f"--warmup-updates {args.warmup_updates}: expected an integer ≥ 0")
    result = run_benchmark(config, args.duration, args.warmup_updates, compiled=args.compile)
    print(format_table(result))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


__all__ = ["JSON_KEYS", "RATE_KEYS", "bound_sps", "main", "run_benchmark"]

if __name__ == "__main__":
    sys.exit(main())
