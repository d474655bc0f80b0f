"""Checkpoints written as a save writes them, without DeepSpeed: memory files, a txl.json that
records them, and `latest`."""

import os
import socket

import torch

from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import CheckpointState


def state(step=10, world_size=2, **changes) -> CheckpointState:
    """A record of run r1 at `step`, saved on `world_size` ranks of 8 global rows."""
    values = dict(
        step=step, world_size=world_size, global_rows=8, rows_per_rank=8 // world_size,
        config={"train": {"seed": 1}}, vocab_size=100, vocab_sha256="ab" * 32, run_id="r1",
        parts={
            "run": {"restarts": 0, "requeues": 2, "slurm_job_id": "77"},
            "stream": {"epoch": 0, "step": step},
        },
    )  # fmt: skip
    return CheckpointState(**{**values, **changes})


def fake_checkpoint(directory, step, world_size, rows_per_rank, complete=True, run_id="r1"):
    """global_step{step} in `directory`: each rank's memory file, whose rows hold their global
    row number (+1000 per layer); if `complete`, the txl.json recording them and `latest`."""
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


def damage_memory_file(tag):
    """Flip one byte of a memory file: same size, another CRC-32."""
    path = tag / "memory_rank1.pt"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


# replace_record's kinds, and what the one line naming such a checkpoint says of it.
NO_RECORD = {
    "missing": "txl.json missing: checkpoint global_step30 is incomplete",
    "directory": "is not a regular file (a FIFO, device or directory)",
    "link": "txl.json is a link",
    "fifo": "is not a regular file (a FIFO, device or directory)",
    "socket": "txl.json is unreadable (No such device or address): checkpoint global_step30",
}


def replace_record(tag, kind):
    """Put `kind` where a checkpoint's txl.json is: nothing, a directory, a link to the record,
    a FIFO or a socket (which open() refuses, like an unreadable file)."""
    record = tag / checkpoint.CLIENT_FILE
    saved = record.read_bytes()
    record.unlink()
    if kind == "directory":
        record.mkdir()
    elif kind == "link":
        (tag.parent / "elsewhere.json").write_bytes(saved)
        record.symlink_to(tag.parent / "elsewhere.json")
    elif kind == "fifo":
        os.mkfifo(record)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(record))
