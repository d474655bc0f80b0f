"""SIGTERM / SIGUSR1 / Ctrl-C -> every rank agrees to checkpoint and stop at the same step.

A signal may reach one rank only (a scheduler, a user's kill); the handler only sets a flag, and
each step all ranks max-reduce their flags, so they all stop after the same step. They reduce
a second flag for train.max_wallclock, so that all ranks also agree on why they stop: a signal on
any rank wins over the deadline (`wallclock` is then False).

Ctrl-C (SIGINT) is a stop signal too, so an interrupted run keeps its work; a second Ctrl-C
exits at once. Launchers forward the terminal's SIGINT to their ranks (torchrun sends it again),
so SIGINTs within INTERRUPT_REPEAT_S of the first count as the same Ctrl-C.

Signals are caught from the first line of launch/pretrain.py on (catch_stop_signals), before
the slow imports: a scheduler's warning can come at any time. So this module imports torch only
where it reduces.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
INTERRUPT_REPEAT_S = 1.0
_received: str | None = None  # the process's first stop signal: signals reach processes
_first_interrupt: float | None = None  # when the first SIGINT came (time.monotonic)


def catch_stop_signals() -> None:
    """From now on a stop signal is remembered instead of ending the process."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _remember)


def _remember(signum, frame) -> None:
    global _received, _first_interrupt
    if signum == signal.SIGINT:
        now = time.monotonic()
        if _first_interrupt is None:
            _first_interrupt = now
        elif now - _first_interrupt >= INTERRUPT_REPEAT_S:
            log.warning("second Ctrl-C: exiting without a checkpoint")
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            return
    _received = _received or signal.Signals(signum).name


class StopRequest:
    """A stop signal (caught since catch_stop_signals) or an elapsed wall-clock budget, until all
    ranks agree on it."""

    def __init__(self, max_wallclock: float | None = None):
        self.wallclock = False  # set by agreed(): every rank stops because of the deadline only
        # From the process's start, not ours: imports and setup count against a job's time limit.
        started = psutil.Process().create_time()
        self.deadline = started + max_wallclock if max_wallclock else None
        self._in_flight = None  # the all-reduce started by the last agreed(), and its flags
        catch_stop_signals()

    @property
    def received(self) -> str | None:
        return _received

    def agreed(self, device: torch.device) -> bool:
        """True on every rank, at the same call, once any rank got a signal or passed the deadline.

        Each call starts a non-blocking all-reduce of this rank's flags and reads the one the
        previous call started, which ran while a training step did: no rank waits for the
        others' flags, and ranks agree one call (one step) after the first request.
        """
        import torch
        import torch.distributed as dist

        expired = self.deadline is not None and time.time() >= self.deadline
        flags = torch.tensor([float(self.received is not None), float(expired)], device=device)
        if not dist.is_initialized():
            return self._decide(flags)
        previous = self._in_flight
        work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, async_op=True)
        self._in_flight = (work, flags)
        if previous is None:
            return False
        previous[0].wait()
        return self._decide(previous[1])

    def settle(self) -> None:
        """Wait for the last all-reduce agreed() started (before other collectives or the end)."""
        if self._in_flight is not None:
            self._in_flight[0].wait()
            self._in_flight = None

    def _decide(self, flags: torch.Tensor) -> bool:
        signalled, expired = (bool(x) for x in flags.tolist())
        self.wallclock = expired and not signalled
        return signalled or expired

    def reason(self) -> str:
        if self.received:
            return f"{self.received} received"
        if self.wallclock:
            return "train.max_wallclock reached"
        return "a stop signal on another rank"
