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
* `sample_*_ms`     where `sample_sps`'s time went, per step of all the games: the trainer's and a
                    worker's time on a core and waiting for one (the scheduler's accounts, Linux);
* `update_page_faults`  fresh pages the kernel handed the trainer per update (`ppo/memory.py`);
* `bound_sps`       the loop's limit from those rates (see `bound_sps()`), and the loop's fraction
                    of it; `fp32_bound_sps` the same limit from the fp32 rates, which a bf16 loop
                    may exceed (`loop_fraction_of_fp32_bound` > 1).

The bound's parts (`ale_vector_sps`, the network's rates) are each measured alone, at their best, in
a fresh interpreter of their own (`in_fresh_process`): a process that has run the pool and the
trainer keeps torch's thread pool, oneDNN's caches and the pool's pages, which slow a part timed
after them, and a bound measured so is lower than the machine's and flatters the loop.

The games are grouped into worker processes as a plain training run groups them on this machine
(by the usable cores, `configs.launch.launch_config`) unless `--n-workers`/`--envs-per-worker`
say otherwise, so that the default measures the default run.

Measurements run one after another, never overlapping: the vector env's process has ended before
the pool starts, and the pool is closed before the network's process starts. A readable table goes to stdout,
then, as the last line, one JSON object with every number.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from typing import Any

from configs.cli import OneLineParser, float_in, int_in, parse_config
from configs.fields import ConfigError
from configs.machine import usable_cores
from configs.ppo import PPOConfig
from configs.refusals import fail
from game.atari import canonical_game

# The measures (torch, the pool, the trainer) are imported by the functions that run them, once
# the command line is accepted: --help and a refused option answer without loading torch.

PROG = "python -m experiments.benchmark"

# Every key the JSON line always has (tests check them).
RATE_KEYS = ("pool_env_sps", "ale_vector_sps", "infer_sps", "train_sps", "sample_sps", "update_sps", "loop_sps",
             "bound_sps", "infer_sps_fp32", "train_sps_fp32", "fp32_bound_sps")
JSON_KEYS = (*RATE_KEYS, "loop_fraction_of_bound", "loop_fraction_of_fp32_bound", "precision", "precision_label",
             "pool_fraction_of_ale", "ale_vector_pid", "network_pid", "benchmark_pid",
             "device", "device_name", "machine", "torch_threads",
             "trainer_torch_threads", "workers_import_torch", "trainer_peak_rss_mb", "trainer_rss_mb",
             "workers_peak_rss_mb", "workers_rss_mb", "update_page_faults", "date", "config", "backend")


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


def _with_pid(measure: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    return {**measure(*args), "pid": os.getpid()}


def in_fresh_process(measure: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """`measure(*args)` in a new interpreter (spawn, not fork: nothing of this process's torch
    threads or caches comes along), which has ended when this returns; the result has its `pid`."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as one:
        return one.submit(_with_pid, measure, *args).result()


# ---- the command -------------------------------------------------------------------------------

def run_benchmark(config: PPOConfig, duration: float, warmup_updates: int,
                  log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
                  compiled: bool = False) -> dict[str, Any]:
    import torch

    from experiments.benchmark_measures import measure_ale_vector, measure_network, measure_pool_and_trainer, status_kb
    from ppo.devices import machine_fingerprint, precision_label, resolve_compute
    from ppo.precision import arithmetic_at

    device, precision = resolve_compute(config.device, config.precision)
    started = time.perf_counter()
    result: dict[str, Any] = {}
    log(f"[1/3] ale-py AtariVectorEnv, {config.n_envs} envs, {os.cpu_count()} threads, alone in a fresh process …")
    ale = in_fresh_process(measure_ale_vector, config, duration)
    result.update(ale, ale_vector_pid=ale.pop("pid"))
    log(f"[2/3] {_pool_name(config)} ({config.n_workers} workers × {config.envs_per_worker} envs) and the trainer on {device} …")
    result.update(measure_pool_and_trainer(config, device, duration, warmup_updates))
    log("[3/3] network alone in a fresh process (pool closed)" + (", eager then torch.compile" if compiled else "") + " …")
    network = in_fresh_process(measure_network, config, result["n_actions"], device, duration,
                               arithmetic_at(precision, 0, config.n_updates), compiled)
    result.update(network, network_pid=network.pop("pid"), benchmark_pid=os.getpid())

    result["precision"] = precision
    # What a plain run on this machine computes in, as its first lines say it: "fp32 (auto)", "bf16".
    result["precision_label"] = precision_label(config.precision, device)
    result["bound_sps"] = bound_sps(result["ale_vector_sps"], result["infer_sps"], result["train_sps"],
                                    config.epochs, device.type)
    result["fp32_bound_sps"] = bound_sps(result["ale_vector_sps"], result["infer_sps_fp32"], result["train_sps_fp32"],
                                         config.epochs, device.type)
    result["loop_fraction_of_bound"] = result["loop_sps"] / result["bound_sps"]
    result["loop_fraction_of_fp32_bound"] = result["loop_sps"] / result["fp32_bound_sps"]
    result["pool_fraction_of_ale"] = result["pool_env_sps"] / result["ale_vector_sps"]
    result["trainer_peak_rss_mb"] = status_kb("self", "VmHWM") / 1024
    result["trainer_rss_mb"] = status_kb("self", "VmRSS") / 1024
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
             f"batch {c['batch_size']}, {c['epochs']} epochs × {c['minibatches']} minibatches, "
             f"precision {r['precision_label']} (as a plain run here)",
             "bound: each part alone in a fresh process, at its best; loop: the trainer with the real pool",
             "", f"{'measure':<19}{'steps/s':>11}  what"]
    lines += [f"{key:<19}{r[key]:>11,.1f}  {what}" for key, what in rows]
    lines += [
        "",
        f"loop / bound      {r['loop_fraction_of_bound']:.1%}   (loop / fp32 bound {r['loop_fraction_of_fp32_bound']:.1%})",
        f"pool / ale-py     {r['pool_fraction_of_ale']:.1%}   ({'actor call' if r['backend'] == 'ray' else 'pipe'} round trip {r['pool_roundtrip_us']:.0f} µs)",
        f"page faults       {r['update_page_faults']:,.0f} per update (fresh pages from the kernel while updating)",
    ]
    if "sample_step_ms" in r:  # the scheduler's accounts (Linux, workers on this machine)
        lines.append(f"sampling (ms per step of all {c['n_envs']} games)  {r['sample_step_ms']:.2f}: trainer on a core "
                     f"{r['sample_trainer_on_core_ms']:.2f} (waiting for one {r['sample_trainer_waiting_ms']:.2f}), "
                     f"each worker {r['sample_worker_on_core_ms']:.2f} (waiting {r['sample_worker_waiting_ms']:.2f})")
    lines += [
        f"memory (MB)       trainer peak {r['trainer_peak_rss_mb']:.0f}, now {r['trainer_rss_mb']:.0f}; "
        f"{'actors' if r['backend'] == 'ray' else 'workers+forkserver'} peak {r['workers_peak_rss_mb']:.0f} (PSS {r['workers_pss_mb']:.0f})",
        f"workers import torch: {r['workers_import_torch']}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    def extra(parser: OneLineParser) -> None:
        group = parser.add_argument_group("benchmark")
        group.add_argument("--duration", type=float_in(0.0, 3600.0, low_open=True), default=10.0, metavar="SECONDS",
                           help="seconds timed per measurement, after its warm-up, > 0 and ≤ 3600 (default: 10)")
        group.add_argument("--warmup-updates", type=int_in(0, 1000), default=1, metavar="N",
                           help="whole updates run before the trainer's phases are timed, 0 to 1000 (default: 1)")
        group.add_argument("--compile", action="store_true",
                           help="also time the network through torch.compile at the run's precision "
                                "(infer_sps_compiled, train_sps_compiled; the trainer itself runs eager)")

    description = "Measure env, network and training-loop speed against this machine's limits."
    # Grouped by this machine's cores unless chosen: what a plain training run here would run.
    config, args, _ = parse_config(argv, prog, description, extra, canonical_game, cores=usable_cores())
    from ppo.devices import resolve_compute

    try:  # the device and its precision, before anything is built or timed
        resolve_compute(config.device, config.precision)
    except ConfigError as e:
        fail(str(e))
    result = run_benchmark(config, args.duration, args.warmup_updates, compiled=args.compile)
    print(format_table(result))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


__all__ = ["JSON_KEYS", "RATE_KEYS", "bound_sps", "in_fresh_process", "main", "run_benchmark"]

if __name__ == "__main__":
    sys.exit(main())
