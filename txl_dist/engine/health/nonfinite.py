"""Non-finite losses: DeepSpeed skips their updates; the trainer counts and bounds them.

Each step's loss stays on the device and is looked at only at log lines and before saves: a run
that must end does so at the next of those, before it saves anything.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a non-finite loss."""


class NonFinite:
    """Non-finite losses: how many in a row now, the longest such run and all of them, each the
    largest over ranks when read."""

    def __init__(self, device: torch.device, max_in_a_row: int, can_skip: bool):
        self.device, self.max_in_a_row, self.can_skip = device, max_in_a_row, can_skip
        self.pending: list[torch.Tensor] = []  # the losses since the last read
        self.in_a_row = self.longest = self.total = 0

    def add(self, loss: torch.Tensor) -> None:
        self.pending.append(loss)

    def clear(self) -> None:
        """Forget every count (a rollback: the steps they counted are gone)."""
        self.pending, self.in_a_row, self.longest, self.total = [], 0, 0, 0

    def read(self) -> tuple[int, int]:
        """(longest run, total) over all ranks (a collective)."""
        if self.pending:
            for bad in (~torch.isfinite(torch.stack(self.pending))).tolist():
                self.in_a_row = (self.in_a_row + 1) * bad
                self.longest = max(self.longest, self.in_a_row)
                self.total += bad
            self.pending = []
        counts = torch.tensor([self.longest, self.total], device=self.device)
        if dist.is_initialized():
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        longest, total = counts.tolist()
        return longest, total

    def check(self, step: int) -> int:
        """The steps skipped so far (a collective); NonFiniteLossError where the run must end:
        an update DeepSpeed cannot skip (fp32, ZeRO-0), or max_in_a_row in a row."""
        longest, total = self.read()
        if total and not self.can_skip:
            raise NonFiniteLossError(
                f"non-finite loss by step {step} with fp32 and ZeRO stage 0, where "
                "DeepSpeed cannot skip the update; lower optim.lr or use bf16 / ZeRO >= 1"
            )
        if longest >= self.max_in_a_row:
            raise NonFiniteLossError(
                f"{longest} consecutive steps had a non-finite loss (by step {step}); "
                "lower optim.lr, raise the warm-up or check the data"
            )
        return total
