"""From a device's name (`--device`) to a torch device that exists on this machine."""

from __future__ import annotations

import torch

from configs.ppo import ConfigError, device_name


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
            raise ConfigError("device", name, "cpu or auto (no CUDA device here)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError("device", name, f"cuda:0 … cuda:{torch.cuda.device_count() - 1}")
    return device
