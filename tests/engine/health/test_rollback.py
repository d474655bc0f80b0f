"""A rollback's checkpoint: the newest intact one before the spike; and the data it skips."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.engine.checkpoint.on_disk import (
    NO_RECORD,
    damage_memory_file,
    fake_checkpoint,
    replace_record,
)
from txl_dist.engine.checkpoint import Checkpointer
from txl_dist.engine.health.rollback import good_checkpoint, roll_back, skipped
from txl_dist.engine.memory import MemoryBank
from txl_dist.process.dist import World


def test_the_newest_intact_checkpoint_before_the_spike_is_chosen(tmp_path):
    for step in (10, 20, 30):
        fake_checkpoint(tmp_path, step, world_size=2, rows_per_rank=4)
    directory = str(tmp_path)
    assert good_checkpoint(directory, before=41).tag == "global_step30"
    assert good_checkpoint(directory, before=30).tag == "global_step20"  # 30 is the spike's
    damage_memory_file(tmp_path / "global_step20")
    assert good_checkpoint(directory, before=30).tag == "global_step10"  # 20 passed over
    assert good_checkpoint(directory, before=10) is None
    assert good_checkpoint(str(tmp_path / "absent"), before=10) is None


def test_the_skipped_batches_are_drawn_and_the_streams_go_on_after_them():
    batches = skipped([("a", 1), ("b", 2), ("c", 3)], 2)
    assert list(batches) == [("c", 3)]


@pytest.mark.parametrize("kind", NO_RECORD)
def test_a_checkpoint_without_a_readable_record_is_passed_over_naming_it(tmp_path, kind):
    for step in (10, 20, 30):
        fake_checkpoint(tmp_path, step, world_size=2, rows_per_rank=4)
    replace_record(tmp_path / "global_step30", kind)
    point = good_checkpoint(str(tmp_path), before=41)
    assert point.tag == "global_step20"
    (passed_over,) = point.passed_over
    assert f"{tmp_path}/global_step30" in passed_over and NO_RECORD[kind] in passed_over
    assert passed_over.endswith(": rolling back to global_step20")


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rollback_warns_once_per_checkpoint_it_passes_over(tmp_path, caplog, rank):
    for step in (10, 20, 30):
        fake_checkpoint(tmp_path, step, world_size=2, rows_per_rank=4)
    replace_record(tmp_path / "global_step30", "missing")
    # A run with no parts to load into: which checkpoint it restores, and what it says, remain.
    checkpoints = Checkpointer(
        parts=[], facts={}, world=World(rank, 2, rank), directory=str(tmp_path),
        save_interval=10, keep_last=3, needed_bytes=0, budget=None,
    )  # fmt: skip
    memory = MemoryBank(1)
    memory.set(0, [torch.ones(2)])
    with caplog.at_level(logging.WARNING):
        point = roll_back(checkpoints, before=41, zero_stage=0, memory=memory)
    assert point.tag == "global_step20" and checkpoints.saved_step == 20
    assert memory.get(0) is None
    warning = (
        f"warning: {tmp_path}/global_step30/txl.json missing: checkpoint global_step30 is "
        "incomplete: rolling back to global_step20"
    )
    assert caplog.messages == ([warning] if rank == 0 else [])  # every rank passes it over
