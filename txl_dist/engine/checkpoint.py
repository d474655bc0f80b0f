"""Checkpoints: DeepSpeed states + per-rank memories and RNG, an atomic `latest`, keep-last-K.

Layout of `{out_dir}/checkpoints/`:
    global_step{N}/            DeepSpeed's model / optimizer files for step N
    global_step{N}/txl.json    CheckpointState: step, stream position, config, vocab, world size
    global_step{N}/memory_rank{r}.pt   rank r's memories (with their first global row) and RNG
    latest                     the newest complete tag, replaced atomically after every rank wrote

`latest` moves only after a barrier that follows every rank's writes, so a crash mid-save leaves
the previous checkpoint as latest; the partial directory is removed by the next save.
"""

from __future__ import annotations

import dataclasses
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

from txl_dist.config import ConfigError
from txl_dist.engine.memory import MemoryBank

CHECKPOINT_DIR = "checkpoints"  # inside train.out_dir
LATEST = "latest"
CLIENT_FILE = "txl.json"
TAG_PATTERN = re.compile(r"^global_step(\d+)$")
STATE_VERSION = 1  # of CheckpointState; files without a version are version 0
# DeepSpeed's ds_to_universal refuses checkpoints whose client state lacks this.
UNIVERSAL_INFO = {"universal_checkpoint_info": {"universal_checkpoint_version": 0.2}}
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


class CheckpointStateError(ValueError):
    """txl.json cannot be read as a checkpoint state; the message names the file."""


@dataclass
class CheckpointState:
    """What txl.json holds next to DeepSpeed's files: where the run is and what it trained on."""

    step: int
    """Optimizer steps done."""
    stream: dict[str, Any]
    """TokenStreams.state_dict() of the training stream: where the next batch starts."""
    world_size: int
    """Ranks that saved it; another world size loads the optimizer via the universal format."""
    global_rows: int
    """Stream rows per step over all ranks; a resume must keep them."""
    rows_per_rank: int
    """Rows per rank: memory_rank{r}.pt holds rows r * rows_per_rank onwards."""
    config: dict[str, Any]
    """The run config, RunConfig.to_dict()."""
    vocab_size: int
    """Vocabulary size of the training data."""
    vocab_sha256: str
    """sha256 of the training data's vocabulary."""
    run_id: str | None = None
    """Run id (wandb's too), kept across resumes; version 0 files may lack it."""
    requeues: int = 0
    """How many times SLURM requeued the job that trained up to this checkpoint."""
    restarts: int = 0
    """How many times the run was resumed (any launcher) before this checkpoint."""
    slurm_job_id: str | None = None
    """The SLURM job that saved it, if any."""
    version: int = STATE_VERSION
    """Layout version of this record."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str, source: str) -> CheckpointState:
        """Parse txl.json (any version up to ours; `source` names it in errors)."""
        values = json.loads(text)
        version = values.setdefault("version", 0)
        if version > STATE_VERSION:
            raise CheckpointStateError(
                f"{source} has checkpoint version {version}, newer than this txl-dist reads "
                f"({STATE_VERSION}): upgrade txl-dist"
            )
        # Version 0 had the same fields plus DeepSpeed's universal_checkpoint_info.
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        if missing := sorted(required - values.keys()):
            raise CheckpointStateError(
                f"{source} lacks {', '.join(missing)}: not a txl-dist checkpoint"
            )
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass
class ResumePoint:
    """A complete checkpoint to resume from."""

    directory: str
    """The checkpoints directory."""
    tag: str
    """Tag inside it, e.g. global_step200."""
    client: CheckpointState
    """What txl.json holds."""


def find_resume_point(resume: str | None, out_dir: str) -> ResumePoint | None:
    """`auto`: the run's latest checkpoint if any; a path: that tag or checkpoints directory."""
    if not resume:
        return None
    if resume == "auto":
        directory = os.path.join(out_dir, CHECKPOINT_DIR)
        if not os.path.exists(os.path.join(directory, LATEST)):
            return None
        tag = read_latest(directory)
    elif os.path.exists(os.path.join(resume, CLIENT_FILE)):
        directory, tag = os.path.split(os.path.normpath(resume))
    elif os.path.exists(os.path.join(resume, LATEST)):
        directory, tag = resume, read_latest(resume)
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
        return ResumePoint(directory, tag, CheckpointState.from_json(f.read(), client_path))


def needs_universal(point: ResumePoint | None, world_size: int, zero_stage: int) -> bool:
    """A ZeRO checkpoint from another world size loads only via DeepSpeed's universal format."""
    return point is not None and point.client.world_size != world_size and zero_stage > 0


def check_resumable(point: ResumePoint, global_rows: int, vocab_sha256: str) -> None:
    """Raise ConfigError if the checkpoint cannot continue a run with these rows and data."""
    saved = point.client
    if saved.global_rows != global_rows:
        raise ConfigError(
            f"checkpoint {point.tag} was trained with train.global_rows={saved.global_rows}, "
            f"this run has {global_rows}; the stream position and memories only continue with "
            "the same global rows"
        )
    if saved.vocab_sha256 != vocab_sha256:
        raise ConfigError(
            f"checkpoint {point.tag} was trained on data with vocabulary sha256 "
            f"{saved.vocab_sha256[:12]}, data.path has {vocab_sha256[:12]}: resume on the data "
            "it was trained on (or prepare this data with that vocabulary, --vocab)"
        )


def read_latest(directory: str) -> str:
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
    state: CheckpointState,
    memory: MemoryBank,
    first_row: int,
    keep_last: int,
) -> str:
    """Write a complete checkpoint for `state.step` from every rank; returns its tag."""
    tag = tag_for(state.step)
    rank = dist.get_rank()
    client = {**dataclasses.asdict(state), **UNIVERSAL_INFO}
    engine.save_checkpoint(directory, tag=tag, client_state=client, save_latest=False)
    torch.save(
        {"first_row": first_row, "memory": memory.rows_state(), "rng": rng_state()},
        os.path.join(directory, tag, f"memory_rank{rank}.pt"),
    )
    dist.barrier()  # every rank's files are on disk before anything points at them
    if rank == 0:
        _write_atomic(os.path.join(directory, tag, CLIENT_FILE), state.to_json())
        _write_atomic(os.path.join(directory, LATEST), tag)
        prune(directory, keep_last, state.run_id)
    dist.barrier()
    return tag


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prune(directory: str, keep_last: int, run_id: str | None) -> None:
    """Delete all but the newest `keep_last` complete checkpoints of run `run_id`, and partial
    ones before them; another run's checkpoints (resumed from elsewhere) are not ours to delete."""
    latest = read_latest(directory)
    latest_step = int(TAG_PATTERN.match(latest).group(1))
    tags = sorted(
        (int(m.group(1)), name) for name in os.listdir(directory) if (m := TAG_PATTERN.match(name))
    )
    runs = {name: _run_of(os.path.join(directory, name)) for _, name in tags}
    ours = [name for _, name in tags if runs[name] is not False and runs[name] == run_id]
    keep = set(ours[-keep_last:]) | {latest}
    for step, name in tags:
        deletable = runs[name] is False or runs[name] == run_id
        if name not in keep and step <= latest_step and deletable:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _run_of(tag_dir: str) -> str | None | bool:
    """The run id a complete checkpoint belongs to; False for a partial one (no txl.json)."""
    path = os.path.join(tag_dir, CLIENT_FILE)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return CheckpointState.from_json(f.read(), path).run_id


def load_memories(
    point: ResumePoint, rows_per_rank: int, rank: int
) -> tuple[list | None, dict | None]:
    """This rank's memory rows from whichever saved ranks held them, and its own RNG state.

    Rows are global, so the saving world size does not matter as long as the global rows match.
    The RNG state is returned only when this rank existed with the same rows before.
    """
    start, stop = rank * rows_per_rank, (rank + 1) * rows_per_rank
    pieces, rng = [], None
    saved_world = point.client.world_size
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
