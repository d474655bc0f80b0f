"""SIGTERM / SIGUSR1 -> every rank agrees to checkpoint and stop at the same step.

A signal may reach one rank only (a scheduler, a user's kill); the handler only sets a flag, and
each step all ranks max-reduce their flags, so they all stop after the same step. They reduce
a second flag for train.max_wallclock, so that all ranks also agree on why they stop: a signal on
any rank wins over the deadline (`wallclock` is then False).
"""

from __future__ import annotations

import signal
import time

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopRequest:
    """Remembers a stop signal or an elapsed wall-clock budget until all ranks agree on it."""

    def __init__(self, max_wallclock: float | None = None):
        self.received: str | None = None
        self.wallclock = False  # set by agreed(): every rank stops because of the deadline only
        self.deadline = time.monotonic() + max_wallclock if max_wallclock else None
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.received = signal.Signals(signum).name

    def agreed(self, device: torch.device) -> bool:
        """True on every rank if any rank got a signal or passed the deadline."""
        expired = self.deadline is not None and time.monotonic() >= self.deadline
        flags = torch.tensor([float(self.received is not None), float(expired)], device=device)
        if dist.is_initialized():
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        signalled, expired = (bool(x) for x in flags.tolist())
        self.wallclock = expired and not signalled
        return signalled or expired

    def reason(self) -> str:
        if self.received:
            return f"{self.received} received"
        if self.wallclock:
            return "train.max_wallclock reached"
        return "a stop signal on another rank"
