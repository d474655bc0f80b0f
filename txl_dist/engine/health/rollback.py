"""A rollback: the newest intact checkpoint before a spike loaded into the run under way, and
the data after it skipped.

Every rank restores the same checkpoint (the same collectives in the same order: DeepSpeed's
load, then the parts) and draws the same number of batches, so the ranks stay at one position
of the streams; the skipped rows' memories are reset, as at a document boundary.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import torch

from data_pipeline import BatchStream
from txl_dist.engine.checkpoint import Checkpointer, tags_in
from txl_dist.engine.checkpoint.resume import (
    ResumePoint,
    convert_to_universal,
    first_intact,
    load_parts,
    needs_universal,
)
from txl_dist.engine.memory import MemoryBank

log = logging.getLogger(__name__)

# Parts a rollback keeps as the run has them: the run's restarts, and the spike record itself
# (its rollbacks and data position go on; a resume loads both from the checkpoint).
KEPT_PARTS = ("run", "spikes")


class LossSpikeError(RuntimeError):
    """A spike the run cannot roll back from, or too many rollbacks: one line says which."""


def good_checkpoint(directory: str, before: int) -> ResumePoint | None:
    """The newest intact checkpoint of a step before `before`: damaged or incomplete ones are
    passed over as `--resume auto` passes them (resume.first_intact), each named in the
    point's passed_over."""
    if not os.path.isdir(directory):
        return None
    tags = [tag for step, tag in reversed(tags_in(directory)) if step < before]
    return first_intact(directory, tags, "rolling back to")[0]


def roll_back(
    checkpoints: Checkpointer, before: int, zero_stage: int, memory: MemoryBank
) -> ResumePoint:
    """Load the newest intact checkpoint before step `before` into the run (a collective);
    LossSpikeError where there is none."""
    checkpoints.wait()  # a background save finishes before its directory is read
    point = good_checkpoint(checkpoints.directory, before)
    if point is None:
        raise LossSpikeError(
            f"a loss spike from step {before} on, and no checkpoint before it to roll back to: "
            "save earlier (train.save_interval) or turn the detector off (spikes.enabled=false)"
        )
    for damaged in point.passed_over if checkpoints.world.is_main else ():
        log.warning(f"warning: {damaged}")
    universal = needs_universal(point, checkpoints.world.world_size, zero_stage)
    tag = convert_to_universal(point) if universal else point.tag
    load_parts(point, tag, [p for p in checkpoints.parts if p.name not in KEPT_PARTS])
    checkpoints.saved_step = point.client.step
    memory.reset()  # the rows' next text is not what the memories precede: skipped rows
    return point


def skipped(streams: BatchStream, count: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The streams from their position on, `count` batches drawn and dropped (every rank the
    same count: the rows stay at one position)."""
    batches = iter(streams)
    for _ in range(count):
        next(batches)
    return batches
