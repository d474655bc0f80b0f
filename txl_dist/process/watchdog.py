"""Hang detection: a thread per rank ends the run when a phase makes no progress in time.

The training loop only says which phase it is in (`with watchdog.phase("step", step):`, a local
assignment: no collective, no store I/O). The watchdog thread publishes that every few seconds
as this rank's heartbeat in the process group's store and checks the phase's deadline. Once it
passes, the main thread is stuck (in a collective waiting for a stopped or cut-off rank, on a
device, in a read); the thread reads the heartbeats twice to find the ranks that stopped
answering (no clocks compared across nodes), says so in one line, writes every thread's stack
to OUT_DIR/errors/rankR.txt (and on NCCL its flight recorder's last collectives to
rankR-nccl-trace.pkl) and ends the process with HANG_EXIT_CODE, long before
train.dist_timeout_s. Every rank watches its own deadline, so every healthy rank ends by
itself; the launcher ends the stopped one, and its restart takes over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

from txl_dist.files import open_new
from txl_dist.process.restarts import HANG_EXIT_CODE

log = logging.getLogger(__name__)

# NCCL's flight recorder keeps a process group's last collectives only if its buffer is sized
# before the group starts; the engine (and so this module) is imported before that.
# (TORCH_FR_BUFFER_SIZE; torch warns in every process at its older name, which a user may set.)
if "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ:
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

SLOW_PHASES = ("start", "checkpoint save", "checkpoint load")
MAX_BEAT_S = 5.0  # heartbeats at most this far apart: the store sees world_size / 5 writes a second


@dataclasses.dataclass(frozen=True)
class Phase:
    """What the main thread is doing, and by when it must be done."""

    name: str
    """step, evaluation, checkpoint save, checkpoint load, start or finish."""
    step: int
    """The training step it belongs to."""
    timeout_s: float
    """Seconds it may go without progress."""
    setting: str
    """The config key that set timeout_s (named in the hang line)."""
    started: float
    """time.monotonic() when it began or last made progress."""

    def where(self) -> str:
        return f"step {self.step}" if self.name == "step" else f"{self.name} at step {self.step}"


class Watchdog:
    """This rank's phases and their deadlines; `start()` runs the thread that enforces them.

    `store` is the process group's store (a connection of our own: its timeout is ours); None
    for one process, where only the deadline is kept.
    """

    def __init__(
        self,
        hang_timeout_s: float,
        checkpoint_timeout_s: float,
        rank: int,
        world_size: int,
        store=None,
        errors_dir: str | None = None,
    ):
        self.timeouts = {"hang": hang_timeout_s, "checkpoint": checkpoint_timeout_s}
        self.rank, self.world_size, self.errors_dir = rank, world_size, errors_dir
        # Beats are frequent enough that two reads 3 beats apart tell a stopped rank.
        self.beat_s = min(MAX_BEAT_S, hang_timeout_s / 10)
        self.store, self.store_timeout_s = store, max(2 * self.beat_s, 1.0)
        if store is not None:
            store.set_timeout(timedelta(seconds=self.store_timeout_s))
        self._phases: list[Phase] = []
        self._current: Phase | None = None  # what the thread reads: one atomic assignment
        self._beats = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="txl-watchdog", daemon=True)

    @classmethod
    def for_run(cls, train, rank: int, world_size: int) -> Watchdog:
        """The watchdog a TrainConfig asks for, started; with hang_timeout_s null, one that
        only keeps the phases. Call after the process group is up: the heartbeats go to its
        store."""
        if train.hang_timeout_s is None:
            return cls(math.inf, math.inf, rank, world_size)
        store = None
        if world_size > 1:
            from torch.distributed.distributed_c10d import _get_default_store

            store = _get_default_store().clone()  # its own socket, so its own timeout
        errors = os.path.join(train.out_dir, "errors")
        timeouts = (train.hang_timeout_s, train.checkpoint_timeout_s)
        watchdog = cls(*timeouts, rank, world_size, store, errors)
        watchdog.start()
        return watchdog

    # ---- the main thread's side ----

    @contextlib.contextmanager
    def phase(self, name: str, step: int, slow: bool = False) -> Iterator[None]:
        """Run the block as phase `name`; slow (and SLOW_PHASES) get train.checkpoint_timeout_s.

        Phases nest: when an inner one ends, the outer one's clock starts again (it progressed).
        """
        slow = slow or name in SLOW_PHASES
        kind = "checkpoint" if slow else "hang"
        self._push(Phase(name, step, self.timeouts[kind], f"train.{kind}_timeout_s", 0.0))
        try:
            yield
        finally:
            self._phases.pop()
            self._current = None
            if self._phases:
                self._push(self._phases.pop())

    def progress(self) -> None:
        """The current phase advanced (an evaluation batch): its clock starts again."""
        if self._phases:
            self._push(self._phases.pop())

    def _push(self, phase: Phase) -> None:
        phase = dataclasses.replace(phase, started=time.monotonic())
        self._phases.append(phase)
        self._current = phase

    @property
    def current(self) -> Phase | None:
        """The innermost phase running now."""
        return self._current

    def overdue(self) -> Phase | None:
        """The current phase if it is past its deadline."""
        phase = self._current
        if phase is not None and time.monotonic() - phase.started > phase.timeout_s:
            return phase
        return None

    # ---- the thread ----

    def start(self) -> None:
        self._beat()  # every rank's key exists from the start
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stopped.wait(self.beat_s):
            self._beat()
            phase = self.overdue()
            if phase is not None:
                self._end(phase)

    def _beat(self) -> None:
        if self.store is None:
            return
        self._beats += 1
        phase = self._current
        where = f"in {phase.where()}" if phase else "between phases"
        beat = dict(beat=self._beats, where=where)
        with contextlib.suppress(RuntimeError):  # store unreachable: the readers will say so
            self.store.set(_key(self.rank), json.dumps(beat))

    def _end(self, phase: Phase) -> None:
        """Say which phase hung and who stopped answering, keep the stacks, end the process."""
        stalled = time.monotonic() - phase.started
        line = (
            f"rank {self.rank} hung: no progress in {phase.where()} for {stalled:.0f} s "
            f"({phase.setting}={phase.timeout_s:g}); {self._who()}; ending the run"
        )
        kept = [f"stacks: {path}" for path in [self._dump_stacks()] if path]
        kept += [f"NCCL flight recorder: {path}" for path in [self._dump_flight_recorder()] if path]
        log.error(f"{line} ({'; '.join(kept)})" if kept else line)
        os._exit(HANG_EXIT_CODE)

    def _who(self) -> str:
        """Which ranks stopped answering: their beat did not change over three of ours (we go
        on beating: other ranks may be deciding the same about us)."""
        if self.store is None:
            return "no other ranks"
        try:
            before = self._read_beats()
            for _ in range(3):
                time.sleep(self.beat_s)
                self._beat()
            after = self._read_beats()
        except (RuntimeError, TimeoutError):  # DistStoreError (refused, reset) or no answer
            return _store_host_silent()
        silent = [
            r
            for r in range(self.world_size)
            if r != self.rank and (r not in after or after[r] == before.get(r))
        ]
        if not silent:
            return "every rank answers (a collective, a device or a read hangs)"
        named = ", ".join(
            f"rank {r} (last heard {after[r]['where']})"
            if r in after
            else f"rank {r} (never heard)"
            for r in silent[:8]
        )
        return f"not answering: {named}" + (f" and {len(silent) - 8} more" if silent[8:] else "")

    def _read_beats(self) -> dict[int, dict]:
        """Every rank's last beat; TimeoutError when the store does not answer (a stopped host
        leaves reads waiting for ever, whatever the store's timeout)."""

        def read() -> dict[int, dict]:
            present = [r for r in range(self.world_size) if self.store.check([_key(r)])]
            values = self.store.multi_get([_key(r) for r in present]) if present else []
            return {r: json.loads(v) for r, v in zip(present, values)}

        answer: list = []
        reader = threading.Thread(target=lambda: answer.append(_outcome(read)), daemon=True)
        reader.start()
        reader.join(self.store_timeout_s)
        if not answer:
            raise TimeoutError
        if isinstance(answer[0], Exception):
            raise answer[0]
        return answer[0]

    def _dump_stacks(self) -> str | None:
        """Every thread's stack (the main thread's shows where it hangs) to errors/rankR.txt."""
        if self.errors_dir is None:
            return None
        path = os.path.join(self.errors_dir, f"rank{self.rank}.txt")
        try:
            os.makedirs(self.errors_dir, exist_ok=True)
            with open_new(path) as f:
                faulthandler.dump_traceback(f, all_threads=True)
        except OSError:
            return None
        return path

    def _dump_flight_recorder(self) -> str | None:
        """NCCL's record of this rank's last collectives (which one hangs, and who has not
        joined it) to errors/rankR-nccl-trace.pkl, read by torch's `torchfrtrace`; None where
        the group is not NCCL (gloo keeps no such record)."""
        import torch
        import torch.distributed as dist

        if self.errors_dir is None or not dist.is_initialized() or dist.get_backend() != "nccl":
            return None
        c10d = torch._C._distributed_c10d
        dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
        if dump is None:
            return None
        path = os.path.join(self.errors_dir, f"rank{self.rank}-nccl-trace.pkl")
        try:
            trace = dump()
            os.makedirs(self.errors_dir, exist_ok=True)
            with open(path, "wb") as f:
                f.write(trace)
        except (RuntimeError, OSError):
            return None
        return path


def _outcome(fn):
    """fn()'s value, or the exception it raised."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - handed to the waiting thread
        return err


def _key(rank: int) -> str:
    return f"txl-heartbeat/{rank}"


def _store_host_silent() -> str:
    """The store itself does not answer: name who hosts it."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        return f"torchrun's store at {where} not answering (its node stopped or is cut off)"
    return "rank 0 (store host) not answering"
