"""What the network computes in (`--precision`): fp32; bf16 under `torch.autocast`; or bf16's numbers
on fp32 kernels (`bf16-emulated`), a study option that lets any CPU reproduce what a bf16 CPU
computes, at fp32's speed.

Where autocast rounds, for the two kinds of layer this network has (convolution and linear):

    forward:   y = bf16( conv(bf16(x), bf16(W), bf16(b)) )    products exact, sums in fp32
    backward:  g = bf16(∂L/∂y);  ∂L/∂x, ∂L/∂W, ∂L/∂b each computed from g and the bf16 operands,
               then rounded to bf16 (the weight's gradient reaches fp32 only through the cast)

Everything between the layers (ReLU, flatten, the sum of the two heads' gradients at the trunk)
sees bf16 values, and is exact on them or rounded again on entry to the next layer. The emulation
rounds at exactly these points (`round_to_bf16` in both directions around each operand and each
output), so it differs from real bf16 only where oneDNN's bf16 kernels sum in another order: a
last-bit difference before the rounding, which changes a bf16 value only near a tie.
tests/test_precision.py measures how close that is, on real frames, against real autocast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# What the network computes in, one update at a time.
ARITHMETICS = ("fp32", "bf16", "bf16-emulated")
# A run's precision that changes along the schedule: bf16, then fp32 for its last tenth of updates,
# where the learning rate has annealed under a tenth of its start and the screen found bf16's update
# off fp32's (docs/precision.md). `--precision` resolves to one of ARITHMETICS or this
# (`ppo.devices.resolve_precision`); configs.fields.PRECISIONS adds `auto`.
BF16_THEN_FP32 = "bf16-then-fp32"
FP32_TAIL = 0.1  # the share of the schedule's updates computed in fp32 at its end


def arithmetic_at(precision: str, update: int, n_updates: int) -> str:
    """What a run in `precision` computes update `update` in (0-based: the update about to run, its
    sampling and its optimisation alike) of a schedule of `n_updates`."""
    if precision == BF16_THEN_FP32:
        return "bf16" if update < (1 - FP32_TAIL) * n_updates else "fp32"
    assert precision in ARITHMETICS, precision
    return precision


class _RoundToBF16(torch.autograd.Function):
    """x rounded to the nearest bf16 (ties to even), kept in fp32; its gradient rounded the same way,
    as autocast's cast to bf16 rounds the gradient that flows back through it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.to(torch.bfloat16).to(grad.dtype)


def round_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 holding bf16's value of `x`, forward and backward (`_RoundToBF16`)."""
    rounded = _RoundToBF16.apply(x)
    assert isinstance(rounded, torch.Tensor)
    return rounded


class BF16Rounding(TorchFunctionMode):
    """Inside it, every convolution and linear layer rounds as bf16 autocast would (the module's
    docstring), on the fp32 kernels. The layers this network calls are the only ones rounded: the
    rest of autocast's list (matmul, bmm, …) is not used here, and a call to one is refused rather
    than silently left in fp32."""

    ROUNDED = (F.conv2d, F.linear)
    REFUSED = (torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, F.conv1d, F.conv3d, F.conv_transpose2d)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self.ROUNDED:  # (input, weight, bias, …): the three tensors rounded, then the output
            rounded = [round_to_bf16(a) if isinstance(a, torch.Tensor) else a for a in args[:3]]
            return round_to_bf16(func(*rounded, *args[3:], **kwargs))
        if func in self.REFUSED:
            raise NotImplementedError(f"bf16 emulation does not round {getattr(func, '__name__', func)}: add it to BF16Rounding")
        return func(*args, **kwargs)


@contextlib.contextmanager
def computing_in(precision: str, device_type: str) -> Iterator[None]:
    """The arithmetic of `precision` for the forward pass inside (and so for its backward)."""
    if precision == "bf16":
        with torch.autocast(device_type, dtype=torch.bfloat16):
            yield
    elif precision == "bf16-emulated":
        with BF16Rounding():
            yield
    else:
        assert precision == "fp32", precision
        yield
