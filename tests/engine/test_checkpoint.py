"""Checkpoint bookkeeping that needs no process group: state file, resume lookup, pruning, rows."""

import dataclasses
import json
import re

import pytest
import torch

from txl_dist.config import ConfigError
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import (
    CheckpointState,
    CheckpointStateError,
    DamagedCheckpointError,
)


def state(step=10, world_size=2, **changes) -> CheckpointState:
    values = dict(
        step=step, stream={"epoch": 0, "step": step}, world_size=world_size, global_rows=8,
        rows_per_rank=8 // world_size, config={"train": {"seed": 1}}, vocab_size=100,
        vocab_sha256="ab" * 32, run_id="r1", requeues=2, slurm_job_id="77",
    )  # fmt: skip
    return CheckpointState(**{**values, **changes})


def fake_checkpoint(directory, step, world_size, rows_per_rank, complete=True, run_id="r1"):
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
        names = sorted(p.name for p in tag.iterdir())
        files = checkpoint.digests(str(tag), names, sync=False)
        client = state(step, world_size, run_id=run_id, files=files)
        (tag / checkpoint.CLIENT_FILE).write_text(client.to_json())
        (directory / checkpoint.LATEST).write_text(tag.name)


def test_resume_auto_finds_latest_and_nothing_when_fresh(tmp_path):
    assert checkpoint.find_resume_point("auto", str(tmp_path)) is None
    fake_checkpoint(tmp_path / "checkpoints", 10, 2, 4)
    point = checkpoint.find_resume_point("auto", str(tmp_path))
    assert point.tag == "global_step10" and point.passed_over == []
    assert point.client == state(10, 2, files=point.client.files)
    assert sorted(point.client.files) == ["memory_rank0.pt", "memory_rank1.pt"]
    explicit = checkpoint.find_resume_point(str(tmp_path / "checkpoints/global_step10"), "unused")
    assert explicit.tag == "global_step10"
    with pytest.raises(FileNotFoundError, match="neither a checkpoint"):
        checkpoint.find_resume_point(str(tmp_path / "nowhere"), "unused")


def test_prune_keeps_the_last_k_of_this_run_and_removes_partial_leftovers(tmp_path):
    for step in (1, 2):  # a run this one was resumed from: its checkpoints are not ours
        fake_checkpoint(tmp_path, step, 1, 2, run_id="other")
    for step in (10, 20, 30):
        fake_checkpoint(tmp_path, step, 1, 2)
    fake_checkpoint(tmp_path, 25, 1, 2, complete=False)  # a crashed save (before .partial)
    # Conversions go with their checkpoint; unfinished writes up to the latest step go too.
    left = ["global_step10_universal", "global_step20_universal", "global_step15.partial"]
    left += ["global_step20_universal.partial", "global_step40.partial"]
    for name in left:
        (tmp_path / name).mkdir()
    (tmp_path / checkpoint.LATEST).write_text("global_step30")
    checkpoint.prune(str(tmp_path), keep_last=2, run_id="r1")
    assert sorted(p.name for p in tmp_path.glob("global_step*")) == [
        "global_step1",
        "global_step2",
        "global_step20",
        "global_step20_universal",
        "global_step30",
        "global_step40.partial",  # a save after latest's: the next save of step 40 removes it
    ]


def damage_memory_file(tag):
    """Flip one byte of a memory file: same size, another CRC-32."""
    path = tag / "memory_rank1.pt"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


def test_resume_auto_passes_over_damaged_checkpoints_to_the_newest_intact_one(tmp_path):
    ckpts = tmp_path / "checkpoints"
    for step in (10, 20, 30):
        fake_checkpoint(ckpts, step, 2, 4)
    fake_checkpoint(ckpts, 25, 2, 4, complete=False)
    (ckpts / checkpoint.LATEST).write_text("global_step30")
    damage_memory_file(ckpts / "global_step30")
    point = checkpoint.find_resume_point("auto", str(tmp_path))
    assert point.tag == "global_step20"
    damaged, incomplete = point.passed_over  # newest first
    assert re.fullmatch(
        rf"checkpoint {ckpts}/global_step30 is damaged: memory_rank1.pt has CRC-32 [0-9a-f]{{8}}, "
        r"txl.json records [0-9a-f]{8}: resuming from global_step20",
        damaged,
    )
    assert incomplete == (
        f"{ckpts}/global_step25/txl.json missing: checkpoint global_step25 is incomplete: "
        "resuming from global_step20"
    )
    # Named explicitly, a damaged checkpoint is an error, not a silent substitute.
    with pytest.raises(DamagedCheckpointError, match="global_step30 is damaged: memory_rank1"):
        checkpoint.find_resume_point(str(ckpts), "unused")

    (ckpts / "global_step20" / checkpoint.CLIENT_FILE).write_text('{"step": 2')  # cut short
    damage_memory_file(ckpts / "global_step10")
    with pytest.raises(DamagedCheckpointError) as err:
        checkpoint.find_resume_point("auto", str(tmp_path))
    message = str(err.value)  # the newest's damage, and that nothing else could stand in
    assert message.startswith(f"checkpoint {ckpts}/global_step30 is damaged: memory_rank1.pt")
    assert message.endswith(", and no earlier checkpoint is intact")


@pytest.mark.parametrize(
    "name,problem",
    [
        ("memory_rank0.pt", "memory_rank0.pt is missing"),
        (
            "../../etc/hostname",
            "txl.json records '../../etc/hostname', a path outside the checkpoint",
        ),
        ("sub", "sub is not a regular file"),
    ],
)
def test_a_record_is_checked_file_by_file(tmp_path, name, problem):
    fake_checkpoint(tmp_path, 10, 1, 2)
    tag = tmp_path / "global_step10"
    (tag / "sub").mkdir()
    (tag / "memory_rank0.pt").rename(tag / "moved.pt")
    assert checkpoint.damage(str(tag), {name: {"bytes": 0, "crc32": "00000000"}}) == problem


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


def test_state_round_trips_and_reads_version_0_files(tmp_path):
    saved = state()
    assert CheckpointState.from_json(saved.to_json(), "txl.json") == saved
    # What txl-dist wrote before the state had a version: DeepSpeed's key, no run id yet.
    old = dataclasses.asdict(saved)
    del old["version"], old["run_id"], old["requeues"], old["slurm_job_id"]
    old["universal_checkpoint_info"] = {"universal_checkpoint_version": 0.2}
    read = CheckpointState.from_json(json.dumps(old), "txl.json")
    assert read == dataclasses.replace(saved, run_id=None, requeues=0, slurm_job_id=None, version=0)


def test_states_it_cannot_read_are_clear_errors():
    newer = json.dumps({**dataclasses.asdict(state()), "version": checkpoint.STATE_VERSION + 1})
    with pytest.raises(CheckpointStateError, match="a/txl.json has checkpoint version .*upgrade"):
        CheckpointState.from_json(newer, "a/txl.json")
    with pytest.raises(CheckpointStateError, match="a/txl.json lacks global_rows, rows_per_rank"):
        CheckpointState.from_json(
            json.dumps({"step": 3, "world_size": 1, "config": {}}), "a/txl.json"
        )


def test_which_checkpoints_can_resume_this_run(tmp_path):
    point = checkpoint.ResumePoint(str(tmp_path), "global_step10", state(world_size=2))
    checkpoint.check_resumable(point, global_rows=8, vocab_sha256="ab" * 32)
    with pytest.raises(ConfigError, match="train.global_rows=8, this run has 16"):
        checkpoint.check_resumable(point, global_rows=16, vocab_sha256="ab" * 32)
    with pytest.raises(ConfigError, match="vocabulary sha256 abababababab, data.path has cdcdcd"):
        checkpoint.check_resumable(point, global_rows=8, vocab_sha256="cd" * 32)
    # Another world size loads ZeRO's partitioned optimizer only through the universal format.
    assert not checkpoint.needs_universal(None, world_size=1, zero_stage=2)
    assert not checkpoint.needs_universal(point, world_size=2, zero_stage=3)
    assert not checkpoint.needs_universal(point, world_size=1, zero_stage=0)
    assert checkpoint.needs_universal(point, world_size=1, zero_stage=1)
