"""Checkpoints: their parts (parts/), an atomic `latest`, file records, keep-last-K.

Layout of `{out_dir}/checkpoints/`:
    global_step{N}/            DeepSpeed's model / optimizer files for step N
    global_step{N}/txl.json    CheckpointState: step, run id, config, vocab, world size, the
                               record's parts (run, stream position) and the size and CRC-32
                               of every other file of the checkpoint
    global_step{N}/memory_rank{r}.pt   rank r's memories (with their first global row) and RNG
    global_step{N}/tokens_rank{r}.pt   the training tokens rank r has seen
    global_step{N}/tokenizer.json      subword data's tokenizer; its sha256 is txl.json's
                                       vocab_sha256, or the checkpoint is refused
    global_step{N}_universal/  DeepSpeed's universal conversion, for another world size
    latest                     the newest complete tag

A save writes `global_step{N}.partial/`, fsyncs and records every file, then renames it to
`global_step{N}` and only then replaces `latest`: a kill at any moment leaves `latest` naming a
complete checkpoint. Conversions are written the same way. A resume checks the record and, with
`--resume auto`, passes over a damaged newest checkpoint to the previous intact one.

    parts/           what a checkpoint holds, one CheckpointPart each
    store/           the transport: atomic saves, integrity, writes, trust, retention
    snapshot/        asynchronous saves' snapshots in host memory and their thread
    state.py         the layout's names, CheckpointState (txl.json)
    layout_v1.py     the reader of version 0 and 1 records
    checkpointer.py  Checkpointer: when a save is due, what it records; the loop's one call
    size.py          one checkpoint's size, estimated from the config
    resume.py        finding an intact checkpoint and loading its parts into a run
    consolidate.py   reading a checkpoint for export: its weights from any ZeRO stage
    card.py          the README an export carries (how the run trained, escaped text)
"""

from txl_dist.checkpoint_names import CHECKPOINT_DIR, CLIENT_FILE, LATEST
from txl_dist.engine.checkpoint.checkpointer import Checkpointer
from txl_dist.engine.checkpoint.parts import CheckpointPart, Place, RunState
from txl_dist.engine.checkpoint.resume import (
    ResumePoint,
    check_resumable,
    convert_to_universal,
    find_resume_point,
    needs_universal,
    rank_states,
    restore,
)
from txl_dist.engine.checkpoint.state import (
    PARTIAL,
    STATE_VERSION,
    TAG_PATTERN,
    CheckpointState,
    CheckpointStateError,
    read_latest,
    record_facts,
    tag_for,
    tags_in,
)
from txl_dist.engine.checkpoint.store.integrity import DamagedCheckpointError, damage, digests
from txl_dist.engine.checkpoint.store.retention import prune
from txl_dist.engine.checkpoint.store.transaction import CheckpointSaveError, SaveTransaction
from txl_dist.engine.checkpoint.store.trusted import (
    UnsafeCheckpointError,
    check_pickles,
    load_trusted,
)

__all__ = [
    "CHECKPOINT_DIR",
    "CLIENT_FILE",
    "LATEST",
    "PARTIAL",
    "STATE_VERSION",
    "TAG_PATTERN",
    "CheckpointPart",
    "CheckpointSaveError",
    "CheckpointState",
    "CheckpointStateError",
    "Checkpointer",
    "DamagedCheckpointError",
    "Place",
    "ResumePoint",
    "RunState",
    "SaveTransaction",
    "UnsafeCheckpointError",
    "check_pickles",
    "check_resumable",
    "convert_to_universal",
    "damage",
    "digests",
    "find_resume_point",
    "load_trusted",
    "needs_universal",
    "prune",
    "rank_states",
    "read_latest",
    "record_facts",
    "restore",
    "tag_for",
    "tags_in",
]
