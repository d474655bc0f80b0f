"""SIGTERM / SIGUSR1 / Ctrl-C -> every rank agrees to checkpoint and stop at the same step.

A signal may reach one rank only (a scheduler, a user's kill); the handler only sets a flag, and
every train.stop_check_s seconds or so, at the same steps, all ranks max-reduce their flags, so
they all stop after the same step. They reduce a second flag for train.max_wallclock, so that
all ranks also agree on why they stop: a signal on any rank wins over the deadline (`wallclock`
is then False). One process alone decides at every step, from its own flags.

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

    def __init__(self, max_wallclock: float | None = None, agree_every_s: float = 0.0):
        self.wallclock = False  # set by agreed(): every rank stops because of the deadline only
        # From the process's start, not ours: imports and setup count against a job's time limit.
        started = psutil.Process().create_time()
        self.deadline = started + max_wallclock if max_wallclock else None
        self.agree_every_s = agree_every_s  # between the ranks' reductions (0: every call)
        self._in_flight = None  # the all-reduce started by the last reduction, and its flags
        self._calls = 0  # agreed() calls so far
        self._next_reduction = 1  # the call that reduces next
        self._reduced_at, self._reduced_call = time.monotonic(), 0  # the last reduction
        catch_stop_signals()

    @property
    def received(self) -> str | None:
        return _received

    def agreed(self, device: torch.device) -> bool:
        """True on every rank, at the same call, once any rank got a signal or passed the deadline.

        Call it once per step on every rank. Alone, a process decides from its own flags. Ranks
        reduce their flags every `agree_every_s` seconds or so, not at every call: a reduction
        on a GPU is a collective and a read of the device. Each reduction is started without
        waiting and read by the next one, which meanwhile ran beside the steps: no rank waits
        for the others' flags, and ranks agree one reduction after the first request, about
        `2 * agree_every_s` later at most. Every rank reduces at the same calls: the next one
        comes after `agreement_cadence` of the slowest rank's seconds per call, a value the
        reduction itself agrees on.
        """
        expired = self.deadline is not None and time.time() >= self.deadline
        flags = [float(self.received is not None), float(expired)]
        if self._world_size() == 1:
            return self._decide(*flags)
        self._calls += 1
        if self._calls < self._next_reduction:
            return False
        return self._reduce(flags, device)

    def _world_size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size() if dist.is_initialized() else 1

    def _reduce(self, flags: list[float], device: torch.device) -> bool:
        """Start reducing `flags` with this rank's seconds per call since the last reduction;
        decide on the previous reduction, the same on every rank."""
        import torch
        import torch.distributed as dist

        now = time.monotonic()
        per_call = (now - self._reduced_at) / (self._calls - self._reduced_call)
        self._reduced_at, self._reduced_call = now, self._calls
        reduced = torch.tensor([*flags, per_call], device=device)
        previous = self._in_flight
        work = dist.all_reduce(reduced, op=dist.ReduceOp.MAX, async_op=True)
        self._in_flight = (work, reduced)
        if previous is None:
            self._next_reduction = self._calls + 1
            return False
        previous[0].wait()
        signalled, expired, per_call = previous[1].tolist()
        self._next_reduction = self._calls + agreement_cadence(per_call, self.agree_every_s)
        return self._decide(signalled, expired)

    def settle(self) -> None:
        """Wait for the last all-reduce agreed() started (before other collectives or the end)."""
        if self._in_flight is not None:
            self._in_flight[0].wait()
            self._in_flight = None

    def _decide(self, signalled: float, expired: float) -> bool:
        self.wallclock = bool(expired and not signalled)
        return bool(signalled or expired)

    def reason(self) -> str:
        if self.received:
            return f"{self.received} received"
        if self.wallclock:
            return "train.max_wallclock reached"
        return "a stop signal on another rank"


def agreement_cadence(seconds_per_call: float, every_s: float) -> int:
    """Calls from one reduction of the stop flags to the next: about `every_s` seconds."""
    return max(1, int(every_s / seconds_per_call)) if seconds_per_call > 0 else 1
