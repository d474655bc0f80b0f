"""What a checkpoint is: the names of its directories, the record in txl.json, the run's place
and the RNG states saved with each rank's memories."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

CHECKPOINT_DIR = "checkpoints"  # inside train.out_dir
LATEST = "latest"
CLIENT_FILE = "txl.json"
TAG_PATTERN = re.compile(r"^global_step(\d+)$")
PARTIAL = ".partial"  # suffix of a directory being written; renamed away when complete
UNIVERSAL = "_universal"  # suffix of a checkpoint's universal conversion
# Everything a checkpoint leaves in the directory: its tag, conversion, and unfinished writes.
ENTRY_PATTERN = re.compile(rf"^global_step(\d+)({UNIVERSAL})?({re.escape(PARTIAL)})?$")
STATE_VERSION = 1  # of CheckpointState; files without a version are version 0


def tag_for(step: int) -> str:
    return f"global_step{step}"


def step_of(tag: str) -> int:
    """The step of a tag TAG_PATTERN matches."""
    return int(TAG_PATTERN.match(tag).group(1))


def read_latest(directory: str) -> str:
    path = os.path.join(directory, LATEST)
    with open(path) as f:
        tag = f.read().strip()
    if not TAG_PATTERN.match(tag):  # a tag is a directory name: never a path elsewhere
        raise FileNotFoundError(f"{path} names {tag[:80]!r}, not a global_stepN checkpoint tag")
    return tag


def tags_in(directory: str) -> list[tuple[int, str]]:
    """(step, tag) of every complete-named checkpoint in `directory`, oldest first."""
    return sorted(
        (step_of(name), name) for name in os.listdir(directory) if TAG_PATTERN.match(name)
    )


@dataclass
class RunState:
    """Where the run is, kept across resumes in the checkpoint."""

    run_id: str
    """The run's id (wandb's too)."""
    step: int = 0
    """Optimizer steps done."""
    restarts: int = 0
    """Resumes before this start."""
    requeues: int = 0
    """SLURM requeues before this start."""


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
    level: str = "word"
    """The training data's level, char or word (its loss reads as bpc or ppl); older
    checkpoints, from before char-level data, lack it."""
    run_id: str | None = None
    """Run id (wandb's too), kept across resumes; version 0 files may lack it."""
    requeues: int = 0
    """How many times SLURM requeued the job that trained up to this checkpoint."""
    restarts: int = 0
    """How many times the run was resumed (any launcher) before this checkpoint."""
    slurm_job_id: str | None = None
    """The SLURM job that saved it, if any."""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every other file of the checkpoint by relative path: {"bytes": size, "crc32": hex};
    empty in checkpoints saved before txl-dist recorded them, and in the client state DeepSpeed
    keeps (written before the files existed)."""
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
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        if missing := sorted(required - values.keys()):
            raise CheckpointStateError(
                f"{source} lacks {', '.join(missing)}: not a txl-dist checkpoint"
            )
        return cls(**{k: v for k, v in values.items() if k in names})

    @classmethod
    def read(cls, path: str) -> CheckpointState:
        """The state in the txl.json at `path`."""
        with open(path) as f:
            return cls.from_json(f.read(), path)


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
