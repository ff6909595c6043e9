"""The actor-critic: the Nature-DQN convolutional trunk shared by a policy head and a value head."""

from __future__ import annotations

import math
from typing import TypeVar

import torch
from torch import nn

from ppo.precision import ARITHMETICS, computing_in

L = TypeVar("L", nn.Conv2d, nn.Linear)  # a layer with weight and bias (both are made with bias=True here)


def _orthogonal(layer: L, gain: float) -> L:
    # Orthogonal weights keep activations' scale through the trunk (Saxe et al. 2013); the small
    # policy gain makes the initial policy near-uniform, so early exploration is not biased.
    nn.init.orthogonal_(layer.weight, gain)
    assert layer.bias is not None
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """uint8 frames (B, frame_stack, 84, 84) → action logits (B, n_actions) and values (B,)."""

    def __init__(self, n_actions: int, frame_stack: int = 4, channels_last: bool = False,
                 precision: str = "fp32") -> None:
        super().__init__()
        # bf16 (autocast): convolutions and matmuls in bfloat16 (AMX/AVX512-BF16 on CPU, tensor
        # cores on GPU), weights, gradients and Adam kept in fp32; bf16-emulated: the same roundings
        # on fp32 kernels (ppo/precision.py). The outputs are returned as fp32, so the losses,
        # log-probabilities and values downstream are fp32 whatever the precision.
        assert precision in ARITHMETICS, precision
        self.precision = precision
        # Channels-last (NHWC) lets oneDNN's CPU convolutions skip layout reorders: the same
        # numbers, faster (docs/benchmarks.md, "What each choice in the loop buys"). Parameters keep their identity.
        self.channels_last = channels_last
        relu_gain = math.sqrt(2)
        self.trunk = nn.Sequential(
            _orthogonal(nn.Conv2d(frame_stack, 32, kernel_size=8, stride=4), relu_gain),
            nn.ReLU(),
            _orthogonal(nn.Conv2d(32, 64, kernel_size=4, stride=2), relu_gain),
            nn.ReLU(),
            _orthogonal(nn.Conv2d(64, 64, kernel_size=3, stride=1), relu_gain),
            nn.ReLU(),
            nn.Flatten(),
            _orthogonal(nn.Linear(64 * 7 * 7, 512), relu_gain),
            nn.ReLU(),
        )
        self.policy = _orthogonal(nn.Linear(512, n_actions), 0.01)
        self.value = _orthogonal(nn.Linear(512, 1), 1.0)
        self.n_actions = n_actions
        if channels_last:
            self.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs omit it

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if observations.dtype != torch.uint8:
            raise TypeError(f"observations must be uint8 frames, got {observations.dtype}")
        # Scaling here keeps frames uint8 (4× smaller) everywhere before the first layer.
        if self.channels_last:  # reorder the uint8 frames, 4× fewer bytes than after the cast
            observations = observations.contiguous(memory_format=torch.channels_last)
        with computing_in(self.precision, observations.device.type):
            # In bf16 the frames go from uint8 straight to bf16 (0–255 are exact there) and are
            # scaled in it: bit for bit what scaling in fp32 and letting autocast cast gives
            # (tests/test_precision.py), without a 4-byte copy of every frame of the minibatch.
            # The emulation scales in fp32 and rounds at the first layer: the same bf16 values.
            hidden = self.trunk(observations.to(torch.bfloat16 if self.precision == "bf16" else torch.float32) / 255.0)
            logits, values = self.policy(hidden), self.value(hidden).squeeze(-1)
        return logits.float(), values.float()


def sample_actions(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one action per row from softmax(logits) with the Gumbel-max trick.

    argmax(logits + Gumbel noise) is an exact sample of the categorical; unlike
    `Categorical.sample` it takes an explicit generator, so a checkpoint can carry its state.
    """
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(logits.dtype).tiny)))
    return torch.argmax(logits + gumbel, dim=-1)
