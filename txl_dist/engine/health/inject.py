"""Faults injected through the real command, for tests and for users trying the detectors.

Environment variables, not config keys, so a fault never travels in a pasted config:

TXL_INJECT_SPIKE=A-B   the batches at data positions A to B (1-based: a run's step N takes
                       batch N until a rollback skips data) get random targets, on every rank:
                       the loss jumps to about log(vocabulary) and the gradients are noise. Tied
                       to the data, so a rollback that skips those batches removes the fault.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from data_pipeline import IGNORE_INDEX

SPIKE_ENV = "TXL_INJECT_SPIKE"
BITFLIP_ENV = "TXL_INJECT_BITFLIP"
# The top exponent bit by dtype: a value below 2 in magnitude grows by 2**128 (2**16 in fp16).
TOP_EXPONENT_BIT = {torch.float32: 30, torch.bfloat16: 14, torch.float16: 14}
INT_OF = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


@dataclass
class SpikeInjection:
    """Random targets for the batches at data positions first..last."""

    first: int
    """The first data position given random targets."""
    last: int
    """The last one."""

    @classmethod
    def from_env(cls) -> SpikeInjection | None:
        """TXL_INJECT_SPIKE's window; None where it is unset; ValueError naming it if malformed."""
        value = os.environ.get(SPIKE_ENV)
        if not value:
            return None
        bounds = value.split("-")
        numbers = len(bounds) == 2 and all(b.strip().isdigit() for b in bounds)
        first, last = (int(b) for b in bounds) if numbers else (0, 0)
        if not 1 <= first <= last:
            raise ValueError(f"{SPIKE_ENV}={value!r}: expected A-B, data positions 1 <= A <= B")
        return cls(first, last)

    def apply(self, position: int, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """`targets`, random where the batch at `position` lies in the window (the padding kept)."""
        if not self.first <= position <= self.last:
            return targets
        noise = torch.Generator().manual_seed(position)
        random = torch.randint(0, vocab_size, targets.shape, generator=noise)
        return torch.where(targets == IGNORE_INDEX, targets, random)


@dataclass
class BitFlip:
    """A flipped bit in rank `rank`'s gradient at step `step`, first attempt only."""

    step: int
    """The step (1-based) whose gradient is hit."""
    rank: int
    """The rank whose gradient is hit."""
    bit: int | None = None
    """The bit flipped; None: the top exponent bit of the gradient's dtype."""

    @classmethod
    def from_env(cls) -> BitFlip | None:
        """TXL_INJECT_BITFLIP's fault; None where it is unset; ValueError naming it if malformed."""
        value = os.environ.get(BITFLIP_ENV)
        if not value:
            return None
        fields = value.split(":")
        if not 2 <= len(fields) <= 3 or not all(f.strip().isdigit() for f in fields):
            raise ValueError(f"{BITFLIP_ENV}={value!r}: expected STEP:RANK or STEP:RANK:BIT")
        step, rank, *bit = (int(f) for f in fields)
        return cls(step, rank, bit[0] if bit else None)

    def hits(self, step: int, rank: int, attempt: int) -> bool:
        """Whether the gradient of `step`'s `attempt` (1: the first) on `rank` is hit."""
        return (step, rank, attempt) == (self.step, self.rank, 1)

    def flipped(self, grad: torch.Tensor) -> torch.Tensor:
        """`grad` with the bit flipped in its largest element (a copy)."""
        bit = TOP_EXPONENT_BIT[grad.dtype] if self.bit is None else self.bit
        hit = grad.detach().clone()
        flat = hit.view(-1).view(INT_OF[grad.dtype])
        index = int(grad.detach().abs().argmax())
        width = 8 * grad.element_size()
        mask = 1 << bit
        flat[index] ^= mask - (1 << width) if mask >> (width - 1) else mask  # two's complement
        return hit
