"""What a checkpoint is: the names of its directories and the record in txl.json."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from data_pipeline import BatchStream
from data_pipeline.limits import METADATA_BYTES
from data_pipeline.received import read_received_text
from txl_dist.checkpoint_names import LATEST
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint.layout_v1 import upgraded
from txl_dist.process.dist import World

TAG_PATTERN = re.compile(r"^global_step(\d+)$")
PARTIAL = ".partial"  # suffix of a directory being written; renamed away when complete
UNIVERSAL = "_universal"  # suffix of a checkpoint's universal conversion
# Everything a checkpoint leaves in the directory: its tag, conversion, and unfinished writes.
ENTRY_PATTERN = re.compile(rf"^global_step(\d+)({UNIVERSAL})?({re.escape(PARTIAL)})?$")
STATE_VERSION = 2  # of CheckpointState; files without a version are version 0


def tag_for(step: int) -> str:
    return f"global_step{step}"


def step_of(tag: str) -> int:
    """The step of a tag TAG_PATTERN matches."""
    return int(TAG_PATTERN.match(tag).group(1))


def read_latest(directory: str) -> str:
    path = os.path.join(directory, LATEST)
    tag = read_received_text(path, METADATA_BYTES, "checkpoint tag file (latest)").strip()
    if not TAG_PATTERN.match(tag):  # a tag is a directory name: never a path elsewhere
        raise FileNotFoundError(f"{path} names {tag[:80]!r}, not a global_stepN checkpoint tag")
    return tag


def tags_in(directory: str) -> list[tuple[int, str]]:
    """(step, tag) of every complete-named checkpoint in `directory`, oldest first."""
    return sorted(
        (step_of(name), name) for name in os.listdir(directory) if TAG_PATTERN.match(name)
    )


class CheckpointStateError(ValueError):
    """txl.json cannot be read as a checkpoint state; the message names the file."""


def _check_shape(values: Any, source: str) -> None:
    """What the record's readers index into: an object, an integer version, and a files
    record of {"bytes": size, "crc32": hex} entries; CheckpointStateError naming the key."""
    again = "not a record txl-dist wrote; restore the checkpoint or resume from another"
    if not isinstance(values, dict):
        raise CheckpointStateError(f"{source} holds a JSON {type(values).__name__}: {again}")
    version = values.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise CheckpointStateError(f"{source}: version {version!r:.40} is no version: {again}")
    files = values.get("files", {})
    entries = files.items() if isinstance(files, dict) else [("files", files)]
    for name, entry in entries:
        size = entry.get("bytes") if isinstance(entry, dict) else None
        crc = entry.get("crc32") if isinstance(entry, dict) else None
        if not (isinstance(size, int) and size >= 0 and isinstance(crc, str)):
            raise CheckpointStateError(
                f"{source}: files entry {str(name)!r:.80} is not {{bytes: size, crc32: hex}}: "
                f"{again}"
            )


@dataclass
class CheckpointState:
    """What txl.json holds next to DeepSpeed's files: where the run is and what it trained on."""

    step: int
    """Optimizer steps done."""
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
    """The training data's level, char, word or subword (its loss reads as bpc or ppl); older
    checkpoints, from before char-level data, lack it, and those of subword data from before
    the subword level was recorded say word."""
    eos_token: str | None = None
    """The end-of-document token of subword data (its manifest's, which txl-prepare wrote after
    every document; a --eos-token of any name), for exports to stop generation at and start
    prompts after; None without one, and in checkpoints from before it was recorded (their
    tokenizer's own end-of-text token is taken)."""
    run_id: str | None = None
    """Run id (wandb's too), kept across resumes; version 0 files may lack it."""
    init_from: str | None = None
    """What train.init_from started the run's weights from (InitSource.describe), kept across
    resumes; None for a run that started from its seed's weights."""
    parts: dict[str, Any] = field(default_factory=dict)
    """The states of the parts placed in the record, by part name (parts/)."""
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
        _check_shape(values, source)
        version = values.setdefault("version", 0)
        if version > STATE_VERSION:
            raise CheckpointStateError(
                f"{source} has checkpoint version {version}, newer than this txl-dist reads "
                f"({STATE_VERSION}): upgrade txl-dist"
            )
        if version < STATE_VERSION:
            values = upgraded(values)
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
        """The state in the txl.json at `path` (a received file: data_pipeline.received)."""
        return cls.from_json(read_received_text(path, METADATA_BYTES, "checkpoint record"), path)


def record_facts(
    config: RunConfig,
    world: World,
    rows_per_rank: int,
    streams: BatchStream,
    run_id: str,
    init_from: str | None = None,
) -> dict[str, Any]:
    """What every checkpoint record of the run says besides its step and parts (`streams`:
    its training streams, a mix's too; `init_from`: what the run's weights started from)."""
    return dict(
        run_id=run_id,
        world_size=world.world_size,
        global_rows=config.train.global_rows,
        rows_per_rank=rows_per_rank,
        config=config.public_dict(),  # secrets never reach a checkpoint
        vocab_size=streams.vocab_size,
        vocab_sha256=streams.manifest.vocab_sha256,
        level=streams.manifest.level,
        eos_token=streams.manifest.eos_token,
        init_from=init_from,
    )
