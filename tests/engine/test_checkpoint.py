"""Checkpoint bookkeeping that needs no process group: resume lookup, pruning, memory rows."""

import json

import pytest
import torch

from txl_dist.engine import checkpoint


def fake_checkpoint(directory, step, world_size, rows_per_rank, complete=True):
    tag = directory / checkpoint.tag_for(step)
    tag.mkdir(parents=True)
    for rank in range(world_size):
        first = rank * rows_per_rank
        rows = torch.arange(first, first + rows_per_rank, dtype=torch.float)
        memory = [rows.view(-1, 1, 1).expand(-1, 3, 2) + 1000 * layer for layer in range(2)]
        torch.save(
            {"first_row": first, "memory": memory, "rng": {"rank": rank}},
            tag / f"memory_rank{rank}.pt",
        )
    if complete:
        (tag / checkpoint.CLIENT_FILE).write_text(
            json.dumps({"step": step, "world_size": world_size})
        )
        (directory / checkpoint.LATEST).write_text(tag.name)


def test_resume_auto_finds_latest_and_nothing_when_fresh(tmp_path):
    assert checkpoint.find_resume_point("auto", str(tmp_path)) is None
    fake_checkpoint(tmp_path / "checkpoints", 10, 2, 4)
    point = checkpoint.find_resume_point("auto", str(tmp_path))
    assert point.tag == "global_step10" and point.client["step"] == 10
    explicit = checkpoint.find_resume_point(str(tmp_path / "checkpoints/global_step10"), "unused")
    assert explicit.tag == "global_step10"
    with pytest.raises(FileNotFoundError, match="neither a checkpoint"):
        checkpoint.find_resume_point(str(tmp_path / "nowhere"), "unused")


def test_prune_keeps_the_last_k_and_removes_partial_leftovers(tmp_path):
    for step in (10, 20, 30):
        fake_checkpoint(tmp_path, step, 1, 2)
    fake_checkpoint(tmp_path, 25, 1, 2, complete=False)  # a save that crashed midway
    (tmp_path / checkpoint.LATEST).write_text("global_step30")
    checkpoint.prune(str(tmp_path), keep_last=2)
    assert sorted(p.name for p in tmp_path.glob("global_step*")) == [
        "global_step20",
        "global_step30",
    ]


@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_memories_follow_global_rows_across_world_sizes(tmp_path, new_world):
    fake_checkpoint(tmp_path, 5, world_size=2, rows_per_rank=4)
    point = checkpoint.find_resume_point(str(tmp_path), "unused")
    rows_per_rank = 8 // new_world
    for rank in range(new_world):
        rows, rng = checkpoint.load_memories(point, rows_per_rank, rank)
        first = rank * rows_per_rank
        assert rows[1][:, 0, 0].tolist() == [
            1000.0 + r for r in range(first, first + rows_per_rank)
        ]
        assert (rng is not None) == (new_world == 2)
