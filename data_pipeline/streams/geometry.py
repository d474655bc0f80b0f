"""A stream's row layout: where every global row lies in an epoch's virtual token array, and
the layouts refused."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100
ORDERS = ("corpus", "shuffle")


@dataclass(frozen=True)
class Geometry:
    """Where every global row lies in the epoch's virtual token array."""

    tokens: int
    """N, tokens per epoch."""
    global_rows: int
    """G = world_size x rows_per_rank."""
    tgt_len: int
    """T, time steps per batch."""
    row_stride: int
    """L, distance between the starts of consecutive rows."""
    steps: int
    """Batches per epoch, on every rank."""
    tail: bool
    """Evaluation layout: every pair once, padded at the end."""

    @classmethod
    def of(cls, tokens: int, global_rows: int, tgt_len: int, tail: bool) -> Geometry:
        """Row layout for a split of ``tokens`` tokens."""
        if tail:
            stride = -(-(tokens - 1) // global_rows)
            steps = -(-stride // tgt_len)
        else:
            stride = tokens // global_rows
            steps = max(stride - 1, 0) // tgt_len
        return cls(tokens, global_rows, tgt_len, stride, steps, tail)

    def inputs_in_row(self, row: int) -> int:
        """Input positions of a global row (pairs for ``tail``, whole steps otherwise)."""
        if self.tail:
            return int(np.clip(self.tokens - 1 - row * self.row_stride, 0, self.row_stride))
        return self.steps * self.tgt_len

    def width(self, step: int) -> int:
        """Time steps of batch ``step`` (only the last tail batch can be narrower)."""
        if self.tail:
            return min(self.tgt_len, self.row_stride - step * self.tgt_len)
        return self.tgt_len


def check_layout(order: str, rank: int, world_size: int, rows_per_rank: int, tgt_len: int):
    """Raise ValueError unless the order is known and the rank and row layout make sense."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    if not 0 <= rank < world_size or rows_per_rank < 1 or tgt_len < 1:
        raise ValueError(
            f"need 0 <= rank < world_size, rows_per_rank >= 1, tgt_len >= 1; got rank={rank}, "
            f"world_size={world_size}, rows_per_rank={rows_per_rank}, tgt_len={tgt_len}"
        )
