"""How many threads torch uses, set per phase of an iteration.

Sampling runs the network on one small batch (n_envs observations) per env step: splitting that
over threads costs more in synchronisation than it saves, so it uses `sample_threads` (1).
Optimisation runs minibatches of 256 and uses every core (`torch_threads`, 0 = one per core).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with `n` intra-op threads, then put the previous count back."""
    previous = torch.get_num_threads()
    if n != previous:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
