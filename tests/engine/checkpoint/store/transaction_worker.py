"""One of the 2 gloo ranks of test_transaction.py: real DeepSpeed saves (ZeRO-2, bf16) of a run
on subword data (every checkpoint carries its tokenizer), a killed save's leftovers, a write
failing on this rank only, a full disk, asynchronous saves (one of the same step as a
synchronous one, taken while the next step trains, one whose background write fails on this
rank, one falling back to a synchronous save because rank 1's machine says it has no memory
available), and a synchronous and an asynchronous save where links were planted.

python -c "from tests.engine.checkpoint.store.transaction_worker import main; main(ROOT)" RANK
prints `RESULT {json}`: what this rank's saves raised, whether the kept checkpoint reloads, the
phases the after_phase hook heard, the warnings logged, the lines on the snapshots' reserved
memory and this rank's snapshot estimate.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from data_pipeline.corpora.subword import Subword
from tests.conftest import REPO_ROOT
from txl_dist.config.loading import load_run_config
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import Checkpointer, CheckpointState, RunState
from txl_dist.engine.checkpoint.parts import DeepSpeedPart, MemoryPart, TokenizerPart
from txl_dist.engine.checkpoint.snapshot import background
from txl_dist.engine.checkpoint.snapshot.budget import SnapshotBudget
from txl_dist.engine.checkpoint.snapshot.memory import moments_to_come
from txl_dist.engine.memory import MemoryBank
from txl_dist.process.dist import World, init_distributed

WIDTH = 1000  # a Linear(WIDTH, WIDTH): 1,001,000 parameters, 14 MB per checkpoint
NEEDED = 16 * (WIDTH * WIDTH + WIDTH)  # preflight's estimate: 16 bytes per parameter
# The config whose model's memories the snapshot estimate counts: any config does.
SETTINGS = ["model.n_token=10", "model.cutoffs=[]", "model.tie_projs=[false]"]
FILE_LIMIT = 1 << 20  # rank 1's largest file in the one-rank failure: below its optimizer shard
# The data's tokenizer: a byte-level BPE of 300 tokens (any tokenizer does).
TOKENIZER = Subword.train_bpe(300, iter(["the cat sat on the mat\n", "a dog sat on a log\n"] * 20))
STATE = CheckpointState(
    step=0, world_size=2, global_rows=2, rows_per_rank=1, config={}, vocab_size=300,
    vocab_sha256=TOKENIZER.sha256, run_id="r1",
)  # fmt: skip


ASYNC = ("async", "fallback", "planted_async")  # the directories of asynchronous saves


def directories(root: Path) -> dict[str, Path]:
    """The checkpoints directories the ranks save into (`disk` is on a full tmpfs; those in
    ASYNC get asynchronous saves; `planted` ones links where a save writes)."""
    names = ("plain", "disk", "async", "fallback", "planted", "planted_async")
    return {name: root / name / "checkpoints" for name in names}


def victims(checkpoints: Path) -> tuple[Path, Path]:
    """A directory and a file beside `checkpoints` that planted links point to."""
    return checkpoints.parent / "victim", checkpoints.parent / "victim.txt"


def plant(checkpoints: Path) -> None:
    """Links where step 1's save writes its partial directory and `latest`, to the victims."""
    directory, file = victims(checkpoints)
    directory.mkdir(parents=True)
    (directory / "precious").write_text("precious")
    file.write_text("precious")
    checkpoints.mkdir(parents=True)
    (checkpoints / f"global_step1{checkpoint.PARTIAL}").symlink_to(directory)
    (checkpoints / f"{checkpoint.LATEST}{checkpoint.PARTIAL}").symlink_to(file)


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


@contextmanager
def slow_serialization(seconds: float = 1.0) -> Iterator[None]:
    """Background serializations start `seconds` late while inside."""
    serialized = background.serialized

    def late(*args, **kwargs):
        time.sleep(seconds)
        return serialized(*args, **kwargs)

    background.serialized = late
    try:
        yield
    finally:
        background.serialized = serialized


def _logged(level: int) -> list[str]:
    """The messages our loggers log at `level` from now on."""
    messages = []
    handler = logging.Handler(level)
    handler.emit = lambda record: messages.append(record.getMessage())
    handler.addFilter(lambda record: record.levelno == level)
    ours = logging.getLogger("txl_dist")
    ours.setLevel(min(ours.getEffectiveLevel(), level))
    ours.addHandler(handler)
    return messages


def main(root: str) -> None:
    rank, dirs = int(sys.argv[1]), directories(Path(root))
    # A file rendezvous (no port another process could take), then DeepSpeed's setup on it.
    rendezvous = f"file://{root}/rendezvous"
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=2)
    world = World(rank, 2, rank)
    init_distributed(world)
    engine = _engine()
    memory = MemoryBank(1)
    memory.set(0, [torch.full((1, 2, 3), float(rank))])
    config = load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), SETTINGS)
    memories = MemoryPart(memory, rank, 1, torch.device("cpu"), 0, RunState("r1"))
    parts = [DeepSpeedPart(engine), memories, TokenizerPart(TOKENIZER)]
    savers = {
        name: Checkpointer(
            parts=parts,
            facts={},
            world=world,
            directory=str(directory),
            save_interval=0,
            keep_last=2,
            needed_bytes=NEEDED,
            budget=SnapshotBudget(engine, config.model, 1, world),
            async_save=name in ASYNC,
        )
        for name, directory in dirs.items()
    }
    if rank == 1:  # this rank's machine says it has no memory for a snapshot
        savers["fallback"].budget.available_memory = lambda: 0
    out = {
        "snapshot_bytes_before_a_step": savers["async"].budget.snapshot_bytes()
    }  # no moments yet
    out["host_growth_before_a_step"] = moments_to_come(engine.optimizer, in_host_memory=True)
    warnings, infos = _logged(logging.WARNING), _logged(logging.INFO)
    phases = {"plain": [], "async": [], "fallback": []}  # [phase, step] as the hook heard them
    for name, heard in phases.items():
        savers[name].after_phase = lambda phase, step, heard=heard: heard.append([phase, step])

    def train_step(saver: Checkpointer) -> None:
        """A training step as the Trainer's: the update waits for `saver`'s background save."""
        loss = engine(torch.randn(1, WIDTH).bfloat16()).float().pow(2).mean()
        engine.backward(loss)
        saver.before_update()
        engine.step()

    def save(where: str, step: int, train: bool = True) -> str | None:
        """Train a step (unless not `train`), then save it and wait for the save to complete;
        the error's message if the save failed."""
        if train:
            train_step(savers[where])
        try:
            savers[where].write(dataclasses.replace(STATE, step=step))
            savers[where].wait()
        except checkpoint.CheckpointSaveError as err:
            return str(err)
        return None

    save("plain", 1)
    save("fallback", 1, train=False)  # the same state, synchronously for want of memory on rank 1
    # and asynchronously, while the next step trains: its serialization is slowed, so the update
    # comes before it unless before_update waits (the files would hold the next step's weights)
    savers["async"].write(dataclasses.replace(STATE, step=1))
    with slow_serialization():
        train_step(savers["async"])
    savers["async"].wait()
    if rank == 0:  # what a save of step 2 killed midway leaves
        leftover = dirs["plain"] / f"global_step2{checkpoint.PARTIAL}"
        leftover.mkdir()
        (leftover / "stale.pt").write_bytes(b"from the killed save")
    dist.barrier()
    save("plain", 2)

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if rank == 1:  # a real write error on one rank: the kernel refuses to grow its files
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a fatal signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, hard))
    out["one_rank"] = save("plain", 3)
    out["async_one_rank"] = save("async", 3)  # the snapshot is taken; the background write fails
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    if rank == 0:
        plant(dirs["planted"])
        plant(dirs["planted_async"])
    dist.barrier()
    out["planted"] = save("planted", 1)
    out["planted_async"] = save("planted_async", 1)

    save("disk", 1)
    saved = engine.module.weight.detach().clone()
    out["full"] = save("disk", 2)
    engine.load_checkpoint(str(dirs["disk"]), tag="global_step1")
    out["reloaded"] = torch.equal(engine.module.weight, saved)
    out["phases"], out["async_phases"] = phases["plain"], phases["async"]
    out["fallback_phases"], out["warnings"] = phases["fallback"], warnings
    out["reservations"] = [line for line in infos if line.startswith("asynchronous saves: ")]
    out["snapshot_bytes"] = savers["async"].budget.snapshot_bytes()
    out["host_growth"] = moments_to_come(engine.optimizer, in_host_memory=True)
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()
