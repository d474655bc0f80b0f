"""Saves by real DeepSpeed engines (ZeRO-2, bf16) on 2 gloo ranks: what a save records, what a
failed save leaves behind, a write failing on one rank only, and a full disk."""

import dataclasses
import os
import re
import resource
import shutil
import signal

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.conftest import small_disk
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import CheckpointState
from txl_dist.engine.dist import World, init_distributed
from txl_dist.engine.memory import MemoryBank

WIDTH = 1000  # a Linear(WIDTH, WIDTH): 1,001,000 parameters, 14 MB per checkpoint
NEEDED = 16 * (WIDTH * WIDTH + WIDTH)  # preflight's estimate: 16 bytes per parameter
DISK = 20 << 20  # room for one checkpoint, not two
FILE_LIMIT = 1 << 20  # rank 1's largest file in the one-rank failure: below its optimizer shard
STATE = CheckpointState(
    step=0, stream={}, world_size=2, global_rows=2, rows_per_rank=1, config={}, vocab_size=10,
    vocab_sha256="0" * 64, run_id="r1",
)  # fmt: skip


def _engine():
    import deepspeed

    torch.manual_seed(0)
    model = torch.nn.Linear(WIDTH, WIDTH)
    config = {
        "train_batch_size": 2,
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2},
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def _rank(rank: int, rendezvous: str, dirs: dict, results) -> None:
    # A file rendezvous (no port another process could take), then DeepSpeed's setup on it.
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    init_distributed(World(rank, 2, rank))
    engine = _engine()
    memory = MemoryBank(1)
    memory.set(0, [torch.full((1, 2, 3), float(rank))])

    def save(directory, step) -> str | None:
        """Train a step, then save it; the error's message if the save failed."""
        loss = engine(torch.randn(1, WIDTH).bfloat16()).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        state = dataclasses.replace(STATE, step=step)
        try:
            checkpoint.save(engine, str(directory), state, memory, rank, 2, NEEDED)
        except checkpoint.CheckpointSaveError as err:
            return str(err)
        return None

    out = {}
    save(dirs["plain"], 1)
    if rank == 0:  # what a save of step 2 killed midway leaves
        leftover = dirs["plain"] / f"global_step2{checkpoint.PARTIAL}"
        leftover.mkdir()
        (leftover / "stale.pt").write_bytes(b"from the killed save")
    dist.barrier()
    save(dirs["plain"], 2)

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if rank == 1:  # a real write error on one rank: the kernel refuses to grow its files
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a fatal signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, hard))
    out["one_rank"] = save(dirs["plain"], 3)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    save(dirs["disk"], 1)
    saved = engine.module.weight.detach().clone()
    out["full"] = save(dirs["disk"], 2)
    engine.load_checkpoint(str(dirs["disk"]), tag="global_step1")
    out["reloaded"] = torch.equal(engine.module.weight, saved)
    results[rank] = out
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    """The checkpoints directories the ranks saved into (`disk` is a full tmpfs) and what each
    rank saw."""
    root = tmp_path_factory.mktemp("saves")
    dirs = {"plain": root / "plain" / "checkpoints", "disk": root / "disk" / "checkpoints"}
    with small_disk(root / "disk", DISK):
        results = mp.Manager().dict()
        mp.spawn(_rank, args=(str(root / "rendezvous"), dirs, results), nprocs=2)
        yield dirs, dict(results)


def test_a_save_records_every_file_and_replaces_a_killed_saves_leftovers(saves):
    dirs, _ = saves
    tag = dirs["plain"] / "global_step2"
    record = CheckpointState.from_json((tag / checkpoint.CLIENT_FILE).read_text(), "txl.json")
    on_disk = {p.name for p in tag.iterdir()} - {checkpoint.CLIENT_FILE}
    assert set(record.files) == on_disk and "stale.pt" not in on_disk
    assert {"memory_rank0.pt", "memory_rank1.pt", "mp_rank_00_model_states.pt"} <= on_disk
    for name, recorded in record.files.items():
        assert recorded["bytes"] == (tag / name).stat().st_size > 0
    assert checkpoint.damage(str(tag), record.files) is None
    assert not list(dirs["plain"].glob(f"*{checkpoint.PARTIAL}"))


def test_a_truncated_file_makes_resume_fall_back_to_the_previous_checkpoint(saves, tmp_path):
    dirs, _ = saves
    run = tmp_path / "run"
    shutil.copytree(dirs["plain"], run / "checkpoints")
    newest = run / "checkpoints" / "global_step2"
    shard = next(newest.glob("*optim_states.pt"))
    size = shard.stat().st_size
    os.truncate(shard, size // 2)
    point = checkpoint.find_resume_point("auto", str(run))
    assert point.tag == "global_step1"
    assert point.passed_over == [
        f"checkpoint {newest} is damaged: {shard.name} has {size // 2} bytes, txl.json records "
        f"{size}: resuming from global_step1"
    ]
    with pytest.raises(checkpoint.DamagedCheckpointError, match=f"{shard.name} has {size // 2}"):
        checkpoint.find_resume_point(str(newest), "unused")  # asked for by name: no fallback


def test_a_write_failing_on_one_rank_ends_the_save_on_every_rank(saves):
    dirs, results = saves
    message = results[0]["one_rank"]
    assert results[1]["one_rank"] == message
    assert message.startswith(f"saving checkpoint global_step3 in {dirs['plain']} failed on rank 1")
    assert message.endswith("(latest still names global_step2)") and "\n" not in message
    assert (dirs["plain"] / checkpoint.LATEST).read_text() == "global_step2"
    assert sorted(p.name for p in dirs["plain"].glob("global_step*")) == [
        "global_step1",
        "global_step2",
    ]


def test_a_full_disk_ends_the_save_naming_the_directory_and_bytes_needed(saves):
    dirs, results = saves
    message = results[0]["full"]
    assert results[1]["full"] == message
    free = re.search(r"bytes, ([\d,]+) are free", message).group(1)
    assert message == (
        f"no space left in {dirs['disk']} for checkpoint global_step2: one checkpoint needs about "
        f"{NEEDED:,} bytes, {free} are free; free space or move train.out_dir, then continue "
        "with --resume auto (latest still names global_step1)"
    )
    assert int(free.replace(",", "")) == shutil.disk_usage(dirs["disk"]).free < NEEDED
    # The previous checkpoint is as it was saved: its record matches, and it loads.
    assert checkpoint.find_resume_point("auto", str(dirs["disk"].parent)).tag == "global_step1"
    assert not list(dirs["disk"].glob(f"*{checkpoint.PARTIAL}"))
    assert results[0]["reloaded"] and results[1]["reloaded"]
