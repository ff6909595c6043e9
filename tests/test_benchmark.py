"""`python -m experiments.benchmark` end to end: the real command, tiny settings, in a subprocess."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from configs.launch import grouped_for_cores
from configs.machine import usable_cores
from configs.ppo import PPOConfig
from experiments.benchmark import JSON_KEYS, RATE_KEYS, bound_sps
from experiments.benchmark_measures import sampling_breakdown, scheduler_ns
from ppo.devices import has_fast_bf16
from tests import process_table

REPO = Path(__file__).resolve().parents[1]
# Each measurement runs its call at least once (the loop twice) whatever --duration says, so a
# hundredth of a second still gives every rate the test checks; the wait would only repeat calls.
TINY = ["--worker-steps", "8", "--epochs", "2", "--minibatches", "2",
        "--duration", "0.01", "--warmup-updates", "1", "--device", "cpu"]


def _run(args: list[str], marker: str, timeout: float) -> subprocess.CompletedProcess[str]:
    # The marker is inherited by every process the command starts (forkserver, workers, resource
    # tracker), so any that outlive it can be found afterwards, wherever they were reparented.
    env = {**os.environ, "BENCHMARK_TEST_MARKER": marker, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "experiments.benchmark", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _assert_nothing_left(marker: str, children_before: set[int]) -> None:
    deadline = time.monotonic() + 60.0  # the forkserver and tracker exit once they see EOF
    while True:
        left = process_table.marked("BENCHMARK_TEST_MARKER", marker)
        new_children = set(process_table.children(os.getpid())) - children_before
        if not left and not new_children:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"processes left behind: marked {left}, children of the test {sorted(new_children)}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_benchmark_prints_consistent_json_and_leaves_no_process(precision: str) -> None:
    if precision == "bf16" and not has_fast_bf16(torch.device("cpu")):
        pytest.skip("this CPU has neither AVX512-BF16 nor AMX")
    marker = uuid.uuid4().hex
    before = set(process_table.children(os.getpid()))
    compile_args = ["--compile"] if precision == "bf16" else []  # one compile (~1 min) in the suite, where it is asked for
    # fp32: the games grouped as a plain training run groups them on these cores; bf16: as asked
    layout = ["--n-workers", "2"] if precision == "bf16" else []
    grouped = grouped_for_cores(PPOConfig(), usable_cores())
    n_workers, envs_per_worker = (2, 1) if layout else (grouped.n_workers, grouped.envs_per_worker)
    result = _run([*TINY, *layout, "--precision", precision, *compile_args], marker, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) > 1, "expected a table before the JSON line"
    data = json.loads(lines[-1])

    missing = [k for k in JSON_KEYS if k not in data]
    assert not missing, f"missing keys {missing}"
    for key in RATE_KEYS:
        assert isinstance(data[key], float) and math.isfinite(data[key]) and data[key] > 0, (key, data[key])

    config = data["config"]
    assert (config["n_workers"], config["envs_per_worker"], config["worker_steps"], config["epochs"],
            config["minibatches"]) == (n_workers, envs_per_worker, 8, 2, 2)
    assert data["backend"] == "local"
    assert data["device"] == "cpu"
    assert data["precision"] == precision and config["precision"] == precision
    assert data["torch_threads"] == os.cpu_count()
    assert data["workers_import_torch"] is False
    # The bound's parts were each timed alone in a process of their own, which had ended by the end.
    part_pids = {data["ale_vector_pid"], data["network_pid"]}
    assert len(part_pids) == 2 and data["benchmark_pid"] not in part_pids
    assert not any(Path(f"/proc/{pid}").exists() for pid in part_pids)
    assert data["precision_label"] == precision  # asked for by name, so no "(auto)"
    assert f"precision {precision} (as a plain run here)" in result.stdout

    # The machine the rates hold for, read here from the kernel and torch, not from the code under test.
    cpuinfo = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in cpuinfo.splitlines()))
    machine = data["machine"]
    assert machine["cpu"] == (f"{fields['model name']} (cpu family {fields['cpu family']}, model {fields['model']}, "
                              f"stepping {fields['stepping']})")
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert (machine["device"], machine["torch"]) == ("cpu", torch.__version__)
    assert data["device_name"] == machine["cpu"]
    assert f"machine: {machine['cpu']}, kernels {machine['cpu_capability']}" in result.stdout

    # Both bounds, recomputed from the printed rates (CPU: env, inference and training share the cores).
    expected = 1 / (1 / data["ale_vector_sps"] + 1 / data["infer_sps"] + config["epochs"] / data["train_sps"])
    assert data["bound_sps"] == pytest.approx(expected, rel=1e-9)
    assert data["bound_sps"] == pytest.approx(bound_sps(data["ale_vector_sps"], data["infer_sps"],
                                                        data["train_sps"], config["epochs"], "cpu"))
    fp32 = 1 / (1 / data["ale_vector_sps"] + 1 / data["infer_sps_fp32"] + config["epochs"] / data["train_sps_fp32"])
    assert data["fp32_bound_sps"] == pytest.approx(fp32, rel=1e-9)
    assert data["loop_fraction_of_bound"] == pytest.approx(data["loop_sps"] / data["bound_sps"])
    assert data["loop_fraction_of_fp32_bound"] == pytest.approx(data["loop_sps"] / data["fp32_bound_sps"])
    assert data["pool_fraction_of_ale"] == pytest.approx(data["pool_env_sps"] / data["ale_vector_sps"])
    assert data["infer_sps_fp32"] == max(data["infer_sps_contiguous"], data["infer_sps_channels_last"])
    assert data["train_sps_fp32"] == max(data["train_sps_contiguous"], data["train_sps_channels_last"])
    if precision == "fp32":  # the loop's rates are the fp32 ones, the two bounds one
        assert (data["infer_sps"], data["train_sps"]) == (data["infer_sps_fp32"], data["train_sps_fp32"])
        assert data["bound_sps"] == data["fp32_bound_sps"] and "train_sps_bf16" not in data
    else:
        assert (data["infer_sps"], data["train_sps"]) == (data["infer_sps_bf16"], data["train_sps_bf16"])
    assert data["infer_sps_1_thread"] > 0
    compiled_keys = ("infer_sps_compiled", "train_sps_compiled", "compile_s")
    if compile_args:  # measured beside eager, and shown in the table
        assert all(isinstance(data[k], float) and data[k] > 0 for k in compiled_keys), {k: data.get(k) for k in compiled_keys}
        assert "train_sps_compiled" in result.stdout and "torch.compile" in result.stdout
    else:
        assert not any(k in data for k in compiled_keys)

    # Memory: the trainer and the workers (and the forkserver) were all measured.
    assert data["trainer_peak_rss_mb"] >= data["trainer_rss_mb"] > 0
    assert data["workers_peak_rss_mb"] >= data["workers_rss_mb"] > 0
    assert data["worker_processes"] == n_workers + 1  # and the forkserver

    # Fresh pages the kernel handed out while updating, per update: counted, and shown.
    assert isinstance(data["update_page_faults"], float) and data["update_page_faults"] >= 0
    assert f"page faults       {data['update_page_faults']:,.0f} per update" in result.stdout

    # Where sampling's time went, from the scheduler's accounts: read within the timed interval, so
    # the trainer's and the workers' time on a core cannot exceed the cores the interval had.
    breakdown = {k: data[k] for k in SAMPLING_KEYS}
    assert all(isinstance(v, float) and v >= 0 for v in breakdown.values()), breakdown
    on_cores = data["sample_trainer_on_core_ms"] + n_workers * data["sample_worker_on_core_ms"]
    assert 0 < on_cores <= os.cpu_count() * data["sample_step_ms"], breakdown
    assert f"sampling (ms per step of all {config['n_workers'] * config['envs_per_worker']} games)" in result.stdout

    _assert_nothing_left(marker, before)


SAMPLING_KEYS = ("sample_step_ms", "sample_trainer_on_core_ms", "sample_trainer_waiting_ms",
                 "sample_worker_on_core_ms", "sample_worker_waiting_ms")


def test_sampling_breakdown_is_per_step_with_the_workers_averaged() -> None:
    # 2 steps in 10 ms; the trainer 4 ms on a core and 1 ms waiting; the workers 2 and 4 ms on a
    # core, 3 and 1 ms waiting: per step 5 ms, the trainer 2 and 0.5, a worker (1 + 2)/2 and (1.5 + 0.5)/2.
    before = [(10_000_000, 0), (0, 5), (7, 7)]
    after = [(14_000_000, 1_000_000), (2_000_000, 3_000_005), (4_000_007, 1_000_007)]
    assert sampling_breakdown(before, after, wall_s=0.010, steps=2) == pytest.approx(
        {"sample_step_ms": 5.0, "sample_trainer_on_core_ms": 2.0, "sample_trainer_waiting_ms": 0.5,
         "sample_worker_on_core_ms": 1.5, "sample_worker_waiting_ms": 1.0})
    # An account missing before or after (a process gone, no schedstat, an actor elsewhere): nothing.
    assert sampling_breakdown([*before[:2], None], after, wall_s=0.010, steps=2) == {}
    assert sampling_breakdown(before, [None, *after[1:]], wall_s=0.010, steps=2) == {}


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="the kernel keeps no schedstat")
def test_scheduler_accounts_hold_at_least_the_cpu_time_a_process_used() -> None:
    # A child spins until it has used 0.3 s of CPU, says how much, then sleeps: its account of time
    # on a core is at least what it used, and it has threads of its own summed (the main one here).
    spin = ("import sys, time\nwhile time.process_time() < 0.3: pass\n"
            "print(time.process_time(), flush=True)\nsys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        used_s = float(child.stdout.readline())  # type: ignore[union-attr]
        account = scheduler_ns(child.pid)
        assert account is not None and account[0] >= used_s * 1e9 * 0.999, (account, used_s)
    finally:
        child.communicate("")
    assert scheduler_ns(child.pid) is None  # reaped: no account


def test_bound_with_a_gpu_overlaps_env_and_inference() -> None:
    assert bound_sps(1000.0, 4000.0, 2000.0, 4, "cuda") == pytest.approx(1 / (1 / 1000 + 4 / 2000))
    assert bound_sps(1000.0, 500.0, 2000.0, 4, "cuda") == pytest.approx(1 / (1 / 500 + 4 / 2000))
    assert bound_sps(1000.0, 4000.0, 2000.0, 4, "cpu") == pytest.approx(1 / (1 / 1000 + 1 / 4000 + 4 / 2000))


@pytest.mark.parametrize("args", [["--duration", "-1"], ["--duration", "0"], ["--duration", "nan"],
                                  ["--duration", "soon"], ["--warmup-updates", "-2"], ["--n-workers", "0"]])
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    marker = uuid.uuid4().hex
    result = _run(args, marker, timeout=600)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert not process_table.marked("BENCHMARK_TEST_MARKER", marker)
