"""What a GPU run keeps for its diagnosis: profiler traces and out-of-memory snapshots.

A torch profiler trace of chosen training steps, one file per rank (train.profile_steps): steps
START to END (inclusive, counted as the run counts them, so a resumed run traces only
those it still has to do) are recorded with CPU and, on GPUs, CUDA activity, and written as a
Chrome trace to OUT_DIR/profile/rank{R}-steps{START}-{END}.json, which Perfetto opens.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

log = logging.getLogger(__name__)


class StepProfiler:
    """Starts the profiler before the first traced step and writes the trace after the last
    (or when the run ends inside the range)."""

    def __init__(self, steps: list[int] | None, out_dir: str, rank: int, device: torch.device):
        self.steps, self.active = steps, None
        name = f"rank{rank}-steps{steps[0]}-{steps[1]}.json" if steps else ""
        self.path = os.path.join(out_dir, "profile", name)
        self.activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            self.activities.append(ProfilerActivity.CUDA)

    def starting(self, step: int) -> None:
        """Step `step` (1-based) is about to run."""
        if self.steps and self.active is None and self.steps[0] <= step <= self.steps[1]:
            self.active = profile(activities=self.activities)
            self.active.__enter__()

    def done(self, step: int) -> None:
        """Step `step` has run."""
        if self.active is not None and step >= self.steps[1]:
            self.close()

    def close(self) -> None:
        """Stop a trace in progress and write it."""
        if self.active is None:
            return
        self.active.__exit__(None, None, None)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.active.export_chrome_trace(self.path)
        self.active = None
        log.info("wrote profiler trace %s", self.path)


class OutOfDeviceMemoryError(RuntimeError):
    """A CUDA out-of-memory error, with where its memory snapshot went and the estimate it broke."""


class SnapshotOnOutOfMemory:
    """`with` block that turns a CUDA out-of-memory error into OutOfDeviceMemoryError, whose one
    line names the allocator snapshot written to OUT_DIR/errors/ (segments and blocks, which
    https://pytorch.org/memory_viz draws) and `estimate()`, txl-inspect's bytes for the run."""

    def __init__(self, out_dir: str, rank: int, estimate: Callable[[], float]):
        self.path = os.path.join(out_dir, "errors", f"rank{rank}-memory-snapshot.pickle")
        self.rank, self.estimate = rank, estimate

    def __enter__(self) -> SnapshotOnOutOfMemory:
        return self

    def __exit__(self, kind, err, traceback) -> None:
        if kind is not None and issubclass(kind, torch.OutOfMemoryError):
            raise OutOfDeviceMemoryError(self._line()) from err

    def _line(self) -> str:
        estimate = f"txl-inspect estimates {self.estimate() / 2**30:.2f} GiB a rank"
        if not torch.cuda.is_available():
            return f"rank {self.rank} ran out of device memory ({estimate})"
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        torch.cuda.memory._dump_snapshot(self.path)
        held = torch.cuda.max_memory_reserved() / 2**30
        return (
            f"rank {self.rank} ran out of device memory at {held:.2f} GiB reserved ({estimate}); "
            f"allocator snapshot: {self.path}; lower train.max_micro_rows or raise the ZeRO stage"
        )
