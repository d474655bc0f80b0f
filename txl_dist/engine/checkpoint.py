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

import importlib
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
# Earlier torch releases have known bypasses of the weights_only unpickler (CVE-2025-32434
# before 2.6; CVE-2026-24747, memory corruption, before 2.10).
MIN_SAFE_TORCH = (2, 10)
# Globals outside torch's weights_only defaults that txl-dist's own checkpoints contain, listed
# from real checkpoints (DeepSpeed 0.19, torch 2.13): ZeRO 0-3, fp32 and bf16, one and two
# ranks, and their universal conversions. ZeRO 0 and the memory files hold none.
CHECKPOINT_GLOBALS = frozenset(
    {
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",
        "deepspeed.runtime.zero.config.ZeroStageEnum",
        "deepspeed.utils.tensor_fragment.fragment_address",
    }
)


class UnsafeCheckpointError(Exception):
    """A checkpoint file could run code when loaded; it is refused before anything unpickles it."""


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
    check_pickles(os.path.join(directory, tag))  # before DeepSpeed or we unpickle anything
    with open(client_path) as f:
        return ResumePoint(directory, tag, json.load(f))


def _read_latest(directory: str) -> str:
    path = os.path.join(directory, LATEST)
    with open(path) as f:
        tag = f.read().strip()
    if not TAG_PATTERN.match(tag):  # a tag is a directory name: never a path elsewhere
        raise FileNotFoundError(f"{path} names {tag[:80]!r}, not a global_stepN checkpoint tag")
    return tag


def check_pickles(directory: str) -> None:
    """Refuse a checkpoint whose .pt files name any global outside CHECKPOINT_GLOBALS.

    torch's scanner reads the pickle opcodes without running them (and rejects opcodes it does
    not know), so this is safe on any file; DeepSpeed's loaders, which unpickle with
    weights_only=False, run only on directories that passed.
    """
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < MIN_SAFE_TORCH:
        raise UnsafeCheckpointError(
            f"torch {torch.__version__} has known ways around its safe unpickler; loading "
            f"checkpoints needs torch>={'.'.join(map(str, MIN_SAFE_TORCH))}"
        )
    for path in _pickle_files(directory):
        try:
            unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        except Exception as err:  # noqa: BLE001 - anything the scanner cannot read is refused
            raise UnsafeCheckpointError(
                f"{path}: refused, not a torch.save file that can be checked without running it "
                f"({type(err).__name__}: {err})"
            ) from err
        unsafe -= CHECKPOINT_GLOBALS
        if unsafe:
            raise UnsafeCheckpointError(
                f"{path}: refused, its pickle calls {sorted(unsafe)[0]}, which txl-dist "
                "checkpoints never contain; load only checkpoints of your own runs (share exports)"
            )


def _pickle_files(directory: str):
    """Every .pt file under `directory`, through linked directories (each visited once)."""
    seen = set()
    for root, dirs, files in os.walk(directory, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        yield from sorted(os.path.join(root, name) for name in files if name.endswith(".pt"))


def load_trusted(path: str) -> Any:
    """torch.load with the weights_only unpickler, allowing the globals our checkpoints hold."""
    allowed = [_resolve(name) for name in sorted(CHECKPOINT_GLOBALS)]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def _resolve(qualified: str) -> Any:
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


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
        saved = load_trusted(path)
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
    output = os.path.join(point.directory, universal)
    if dist.get_rank() == 0 and not os.path.exists(output):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "deepspeed.checkpoint.ds_to_universal",
                "--input_folder",
                os.path.join(point.directory, point.tag),
                "--output_folder",
                output,
            ],
            check=True,
        )
    dist.barrier()
    check_pickles(output)  # it may have come with the checkpoint rather than from the converter
    return universal
