"""Dropout whose CPU masks cost a third of torch's.

On CPU torch draws a dropout mask one Bernoulli at a time from its serial generator (its
vectorised MKL path is taken on Intel processors only): on the tiny config the masks were a
tenth of a training step on this project's AMD machines. Here a CPU mask is cut from 64-bit
random words of the same generator, 16 bits per element, so one draw serves four elements.

The drop probability becomes a multiple of 2**-16 (0.1 -> 0.100006) and kept values are
scaled by the inverse of that rounded keep probability, so the output stays unbiased. Other
devices, and code being compiled (inductor fuses its own masks), use `F.dropout`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 2**16
"""Resolution of the drop probability: each element's draw is 16 random bits."""


class Dropout(nn.Module):
    """`nn.Dropout(p)` (no in-place), with CPU masks drawn 16 bits per element."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"


def dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout of x: 16-bit masks on CPU, `F.dropout` elsewhere and when compiled."""
    if p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    return bits_dropout(x, p)


def bits_dropout(x: Tensor, p: float) -> Tensor:
    """Zero each element of x with probability round(p * 2**16) / 2**16, scale the rest up."""
    dropped = round(p * LEVELS)
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device)
    words.random_(-(2**63), None)  # the full signed range: all 64 bits random
    draws = words.view(torch.int16)[: x.numel()].view(x.shape)  # uniform in [-2**15, 2**15)
    keep = draws >= dropped - LEVELS // 2
    # The bool mask (a byte per element) is what autograd keeps; the scale is applied in
    # float32 arithmetic even for bf16 x, as F.dropout does.
    return (x * keep).mul_(LEVELS / (LEVELS - dropped))
