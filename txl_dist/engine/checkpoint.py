"""Checkpoints: DeepSpeed states + per-rank memories and RNG, an atomic `latest`, keep-last-K.

Layout of `{out_dir}/checkpoints/`:
    global_step{N}/            DeepSpeed's model / optimizer files for step N
    global_step{N}/txl.json    step, data stream state, config, vocab, world size (rank 0)
    global_step{N}/memory_rank{r}.pt   rank r's memories (with their first global row) and RNG
    latest                     the newest complete tag, replaced atomically after every rank wrote

`latest` moves only after a barrier that follows every rank's writes, so a crash mid-save leaves
the previous checkpoint as latest; the partial directory is removed by the next save.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from txl_dist.engine.memory import MemoryBank

LATEST = "latest"
CLIENT_FILE = "txl.json"
TAG_PATTERN = re.compile(r"^global_step(\d+)$")


def tag_for(step: int) -> str:
    return f"global_step{step}"


@dataclass
class ResumePoint:
    """A complete checkpoint to resume from."""

    directory: str
    """The checkpoints directory."""
    tag: str
    """Tag inside it, e.g. global_step200."""
    client: dict[str, Any]
    """What txl.json holds: step, stream state, world size, ..."""


def find_resume_point(resume: str | None, out_dir: str) -> ResumePoint | None:
    """`auto`: the run's latest checkpoint if any; a path: that tag or checkpoints directory."""
    if not resume:
        return None
    if resume == "auto":
        directory = os.path.join(out_dir, "checkpoints")
        if not os.path.exists(os.path.join(directory, LATEST)):
            return None
        tag = _read_latest(directory)
    elif os.path.exists(os.path.join(resume, CLIENT_FILE)):
        directory, tag = os.path.split(os.path.normpath(resume))
    elif os.path.exists(os.path.join(resume, LATEST)):
        directory, tag = resume, _read_latest(resume)
    else:
        raise FileNotFoundError(
            f"--resume {resume}: neither a checkpoint (no {CLIENT_FILE}) nor a checkpoints "
            f"directory (no {LATEST}); pass auto, a checkpoints/ directory or "
            "checkpoints/global_stepN"
        )
    client_path = os.path.join(directory, tag, CLIENT_FILE)
    if not os.path.exists(client_path):
        raise FileNotFoundError(f"{client_path} missing: checkpoint {tag} is incomplete")
    with open(client_path) as f:
        return ResumePoint(directory, tag, json.load(f))


def _read_latest(directory: str) -> str:
    with open(os.path.join(directory, LATEST)) as f:
        return f.read().strip()


def rng_state() -> dict[str, Any]:
    """RNG states in plain types and tensors, so the file loads with weights_only=True."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(
    engine,
    directory: str,
    step: int,
    client: dict[str, Any],
    memory: MemoryBank,
    first_row: int,
    keep_last: int,
) -> str:
    """Write a complete checkpoint for `step` from every rank; returns its tag."""
    tag = tag_for(step)
    rank = dist.get_rank()
    client = {**client, "universal_checkpoint_info": {"universal_checkpoint_version": 0.2}}
    engine.save_checkpoint(directory, tag=tag, client_state=client, save_latest=False)
    torch.save(
        {"first_row": first_row, "memory": memory.rows_state(), "rng": rng_state()},
        os.path.join(directory, tag, f"memory_rank{rank}.pt"),
    )
    dist.barrier()  # every rank's files are on disk before anything points at them
    if rank == 0:
        _write_atomic(os.path.join(directory, tag, CLIENT_FILE), json.dumps(client, indent=1))
        _write_atomic(os.path.join(directory, LATEST), tag)
        prune(directory, keep_last)
    dist.barrier()
    return tag


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prune(directory: str, keep_last: int) -> None:
    """Delete all but the newest `keep_last` complete checkpoints, and partial ones before them."""
    latest = _read_latest(directory)
    latest_step = int(TAG_PATTERN.match(latest).group(1))
    tags = sorted(
        (int(m.group(1)), name) for name in os.listdir(directory) if (m := TAG_PATTERN.match(name))
    )
    complete = [
        name for step, name in tags if os.path.exists(os.path.join(directory, name, CLIENT_FILE))
    ]
    keep = set(complete[-keep_last:]) | {latest}
    for step, name in tags:
        if name not in keep and step <= latest_step:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def load_memories(
    point: ResumePoint, rows_per_rank: int, rank: int
) -> tuple[list | None, dict | None]:
    """This rank's memory rows from whichever saved ranks held them, and its own RNG state.

    Rows are global, so the saving world size does not matter as long as the global rows match.
    The RNG state is returned only when this rank existed with the same rows before.
    """
    start, stop = rank * rows_per_rank, (rank + 1) * rows_per_rank
    pieces, rng = [], None
    saved_world = point.client["world_size"]
    for saved_rank in range(saved_world):
        path = os.path.join(point.directory, point.tag, f"memory_rank{saved_rank}.pt")
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        memory = saved["memory"]
        if memory is None:
            return None, None
        first, count = saved["first_row"], memory[0].size(0)
        if first == start and count == rows_per_rank:
            rng = saved["rng"]
        lo, hi = max(start, first), min(stop, first + count)
        if lo < hi:
            pieces.append([layer[lo - first : hi - first] for layer in memory])
    rows = [torch.cat([piece[i] for piece in pieces]) for i in range(len(pieces[0]))]
    return rows, rng


def convert_to_universal(point: ResumePoint) -> str:
    """Convert a ZeRO checkpoint for a new world size (rank 0 runs it); returns the new tag."""
    universal = f"{point.tag}_universal"
    if dist.get_rank() == 0 and not os.path.exists(os.path.join(point.directory, universal)):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "deepspeed.checkpoint.ds_to_universal",
                "--input_folder",
                os.path.join(point.directory, point.tag),
                "--output_folder",
                os.path.join(point.directory, universal),
            ],
            check=True,
        )
    dist.barrier()
    return universal
