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
        if len(bounds) != 2 or not all(b.strip().isdigit() for b in bounds):
            raise ValueError(f"{SPIKE_ENV}={value!r}: expected A-B, data positions 1 <= A <= B")
        first, last = (int(b) for b in bounds)
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
