"""From a device's name (`--device`) to a torch device that exists on this machine, from a
precision's name (`--precision`) to the dtype the network computes in there, and what of the
machine a run's numbers depend on (`machine_fingerprint`)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

from configs.fields import ConfigError, device_name, precision_name


def resolve_device(name: str) -> torch.device:
    """`auto` (CUDA when present), `cpu`, `cuda` or `cuda:N`; `ConfigError` naming `--device` when
    the name is not one of those or this machine has no such device — before anything starts."""
    if (accepted := device_name(name)) is not None:
        raise ConfigError("device", name, accepted)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "torch is not compiled with CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ConfigError("device", name, f"auto or cpu on this machine ({why}: torch {torch.__version__})")
        if device.index is not None and device.index >= (count := torch.cuda.device_count()):
            raise ConfigError("device", name, f"auto, cpu, cuda or cuda:0 … cuda:{count - 1} ({count} CUDA devices here)")
    return device


def has_fast_bf16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 natively: AVX512-BF16 or AMX on a CPU (asked of the CPU,
    not assumed: elsewhere oneDNN emulates bf16, slower than fp32), bf16 support on a GPU."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def resolve_precision(name: str, device: torch.device) -> str:
    """What `--precision name` computes in on `device`: fp32, bf16, bf16-emulated or bf16-then-fp32
    (ppo/precision.py);
    `ConfigError` naming `--precision` when bf16 is asked of a device without it, or the emulation
    of a GPU (whose fp32 convolutions may run in TF32, not fp32) — before anything starts.

    `auto` is fp32: a default must learn as much per agent step as fp32 does, and bf16 has not been
    shown to (docs/precision.md has the runs). bf16 stays a choice (`--precision bf16`) for wall-clock
    time, where the hardware computes it natively.
    """
    if (accepted := precision_name(name)) is not None:
        raise ConfigError("precision", name, accepted)
    if name == "bf16-emulated" and device.type != "cpu":
        raise ConfigError("precision", name, f"auto, fp32{', bf16' if has_fast_bf16(device) else ''} on a GPU "
                                             "(the emulation rounds on fp32 CPU kernels)")
    if name in ("bf16", "bf16-then-fp32") and not has_fast_bf16(device):
        where = "this GPU" if device.type == "cuda" else "this CPU (no AVX512-BF16, no AMX)"
        raise ConfigError("precision", name, f"fp32, auto or bf16-emulated on {where}" if device.type == "cpu"
                          else f"fp32 or auto on {where}")
    return "fp32" if name == "auto" else name


def resolve_compute(device: str, precision: str) -> tuple[torch.device, str]:
    """`--device` and `--precision` together, as every command that computes takes them: the device
    (`resolve_device`) and what the network computes in there (`resolve_precision`)."""
    resolved = resolve_device(device)
    return resolved, resolve_precision(precision, resolved)


def precision_label(name: str, device: torch.device) -> str:
    """What `--precision name` runs as on `device`, for people: `bf16`, `fp32`, `fp32 (auto)`."""
    resolved = resolve_precision(name, device)
    return f"{resolved} (auto)" if name == "auto" else resolved


def cpu_fields() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                break  # the end of the first processor's block
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's model name with its family, model and stepping: a VM may give two generations of
    CPU one name ("AMD EPYC"), and only these numbers tell them apart."""
    fields = cpu_fields()
    name = fields.get("model name") or platform.processor() or platform.machine()
    family = [f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields]
    return f"{name} ({', '.join(family)})" if family else name


def machine_fingerprint(device: torch.device) -> dict[str, str]:
    """What a run's numbers depend on besides its seed and config. torch and oneDNN pick their CPU
    kernels by the instruction set (`cpu_capability`: AVX2, AVX512, …) and, through the BLAS they
    call, by the CPU's vendor (`cpu_vendor`: an AMD Zen 4 and an Intel CPU both report AVX512 and
    still round differently); two kernels round differently, so one seed writes one `games.csv` per
    machine: the same seed on two machines is two independent draws, and runs pair seed by seed only
    where this is equal."""
    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "absent"
    fingerprint = {
        "cpu": cpu_model(),
        "cpu_vendor": cpu_fields().get("vendor_id") or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "ale_py": installed("ale-py"),
    }
    # Plain str: torch.__version__ is a TorchVersion, a class a weights-only checkpoint load refuses.
    return {name: str(value) for name, value in fingerprint.items()}
