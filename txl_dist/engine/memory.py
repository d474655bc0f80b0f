"""Per-slot Transformer-XL memories: each micro-batch slot continues its own stream rows.

A rank's rows_per_rank stream rows are split into `accum` slots of `micro` rows; slot s always
takes rows [s*micro, (s+1)*micro) of every batch, so its memory is always the text that precedes
those rows. Memories are saved per global row, which lets a run resume on another world size.
"""

from __future__ import annotations

import torch
from torch import Tensor


class MemoryBank:
    """Memories of every slot on this rank: slot -> one [micro, M, d_model] tensor per layer."""

    def __init__(self, slots: int):
        self.slots: list[list[Tensor] | None] = [None] * slots

    def get(self, slot: int) -> list[Tensor] | None:
        return self.slots[slot]

    def set(self, slot: int, mems: list[Tensor]) -> None:
        self.slots[slot] = [m.detach() for m in mems]

    def reset(self) -> None:
        """Forget all context (a new epoch starts the rows at new places)."""
        self.slots = [None] * len(self.slots)

    def rows_state(self) -> list[Tensor] | None:
        """This rank's memories as [rows_per_rank, M, d_model] per layer, on the CPU."""
        if any(s is None for s in self.slots):
            return None
        n_layer = len(self.slots[0])
        return [torch.cat([s[i] for s in self.slots]).cpu() for i in range(n_layer)]

    def load_rows(self, rows: list[Tensor] | None, device: torch.device) -> None:
        """Split [rows_per_rank, M, d] tensors back into the slots."""
        if rows is None:
            self.reset()
            return
        micro = rows[0].size(0) // len(self.slots)
        self.slots = [
            [layer[s * micro : (s + 1) * micro].to(device) for layer in rows]
            for s in range(len(self.slots))
        ]
