"""A short real run from a seed, checked bit for bit against a recorded fingerprint: the hash of its
games.csv and of its final parameters. A change that only moves code (a split file, a typed
checkpoint, one function in place of two) must leave both as they were; a change that alters what
is learned fails here and records the new fingerprint on purpose.

The numbers depend on the kernels torch picks, which follow the CPU's vendor and instruction set,
and on the library versions (ppo/devices.py, machine_fingerprint), so a fingerprint is recorded per
such machine; on
one not recorded the test is skipped, naming the line to add, and the suite's summary says in a
banner of its own that what is learned was not checked (tests/conftest.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from ppo.checkpoint import load_checkpoint
from ppo.devices import machine_fingerprint

# Two processes of two games each, so the overlapped (double-buffered) sampling runs; a rollout long
# enough that games end in every update; one thread and fp32, so the numbers depend on as little
# of the machine as can be.
ARGS = ["--updates", "3", "--n-workers", "2", "--envs-per-worker", "2", "--worker-steps", "128", "--minibatches", "2",
        "--epochs", "2", "--seed", "3", "--torch-threads", "1", "--precision", "fp32", "--device", "cpu",
        "--checkpoint-every", "0"]

# (cpu_vendor, cpu_capability, torch, numpy, ale_py) -> (sha256 of games.csv, sha256 of the parameters).
# The instruction set alone does not pick the kernels: an Intel Xeon and an AMD Zen 4 both report
# AVX512, and the BLAS torch calls takes other code paths on each, so their parameters' last bits differ.
FINGERPRINTS = {
    ("GenuineIntel", "AVX512", "2.13.0+cpu", "2.4.6", "0.12.1"): (
        "941bf5e53c4af127207e02a194bcb0c0c035decf2c26122caa2fa38d5f132b1f",
        "72180ed1620d3065698908e3e444f5c3f1bf85163ede8dffd2b0739bf68ec91f"),
    # AMD EPYC, Zen 4 (family 25, model 17): AVX-512 with BF16.
    ("AuthenticAMD", "AVX512", "2.13.0+cpu", "2.4.6", "0.12.1"): (
        "941bf5e53c4af127207e02a194bcb0c0c035decf2c26122caa2fa38d5f132b1f",
        "5003ba35b7a00771d7b93fef09244cda15b5449a61f78f9d2016a99b56bff3d9"),
    # AMD EPYC with AVX2 only (Zen 3, family 25, model 1). The same games everywhere: only the
    # parameters' last bits differ with the kernels.
    ("AuthenticAMD", "AVX2", "2.13.0+cpu", "2.4.6", "0.12.1"): (
        "941bf5e53c4af127207e02a194bcb0c0c035decf2c26122caa2fa38d5f132b1f",
        "f17e542adddf00462677c45532fa6535cc55b95477d2dc3ed80969da1cd09c9b"),
}


def parameters_hash(model: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(model):
        tensor = model[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def machine_key() -> tuple[str, ...]:
    machine = machine_fingerprint(torch.device("cpu"))
    return tuple(machine[k] for k in ("cpu_vendor", "cpu_capability", "torch", "numpy", "ale_py"))


def test_a_short_run_learns_bit_for_bit_what_it_learned_before(cli, tmp_path: Path) -> None:
    key = machine_key()
    if key not in FINGERPRINTS:
        pytest.skip(f"no fingerprint recorded for {key}: run this test's ARGS and add the hashes to FINGERPRINTS")
    result = cli.run("experiments.breakout", *ARGS, "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    games = (Path(summary["run_dir"]) / "games.csv").read_bytes()
    assert games.count(b"\n") > 4  # games end in the run: the hash covers scores, not only a header
    checkpoint = load_checkpoint(Path(summary["checkpoint"]))
    assert checkpoint["update"] == 3
    fingerprint = (hashlib.sha256(games).hexdigest(), parameters_hash(checkpoint["model"]))
    assert fingerprint == FINGERPRINTS[key]
    assert cli.leftovers() == []
