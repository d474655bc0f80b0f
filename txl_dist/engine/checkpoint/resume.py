"""Resuming: find a complete, intact and safe checkpoint, check it can continue this run, and
load it into the engine, the stream position, the memories and the RNG."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from data_pipeline.streams import TokenStreams
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint.integrity import (
    DamagedCheckpointError,
    damage,
    fsync,
    fsync_tree,
    tokenizer_damage,
)
from txl_dist.engine.checkpoint.state import (
    CHECKPOINT_DIR,
    CLIENT_FILE,
    LATEST,
    PARTIAL,
    UNIVERSAL,
    CheckpointState,
    RunState,
    read_latest,
    set_rng_state,
    step_of,
    tags_in,
)
from txl_dist.engine.checkpoint.trusted import check_pickles, load_trusted
from txl_dist.engine.memory import MemoryBank
from txl_dist.files import new_directory
from txl_dist.process.dist import World
from txl_dist.process.restarts import restart_count
from txl_dist.schema import ConfigError

log = logging.getLogger(__name__)


@dataclass
class ResumePoint:
    """A complete checkpoint to resume from."""

    directory: str
    """The checkpoints directory."""
    tag: str
    """Tag inside it, e.g. global_step200."""
    client: CheckpointState
    """What txl.json holds."""
    passed_over: list[str] = field(default_factory=list)
    """Why newer checkpoints were passed over (damaged), newest first; printed as warnings."""


def find_resume_point(resume: str | None, out_dir: str) -> ResumePoint | None:
    """`auto`: the run's newest intact checkpoint if any (passing over damaged ones with a
    warning); a path: that tag, or the `latest` of that checkpoints directory."""
    if not resume:
        return None
    if resume == "auto":
        directory = os.path.join(out_dir, CHECKPOINT_DIR)
        if not os.path.exists(os.path.join(directory, LATEST)):
            return None
        return _newest_intact(directory)
    if os.path.exists(os.path.join(resume, CLIENT_FILE)):
        return _checked_point(*os.path.split(os.path.normpath(resume)))
    if os.path.exists(os.path.join(resume, LATEST)):
        return _checked_point(resume, read_latest(resume))
    raise FileNotFoundError(
        f"--resume {resume}: neither a checkpoint (no {CLIENT_FILE}) nor a checkpoints "
        f"directory (no {LATEST}); pass auto, a checkpoints/ directory or "
        "checkpoints/global_stepN"
    )


def _newest_intact(directory: str) -> ResumePoint:
    """`latest`, or if it is damaged the newest earlier checkpoint that is intact."""
    latest = read_latest(directory)
    earlier = [(step, name) for step, name in tags_in(directory) if step < step_of(latest)]
    damaged = []
    for tag in [latest, *(name for _, name in reversed(earlier))]:
        try:
            point = _checked_point(directory, tag)
        except DamagedCheckpointError as err:
            damaged.append(str(err))
            continue
        point.passed_over = [f"{reason}: resuming from {tag}" for reason in damaged]
        return point
    raise DamagedCheckpointError(f"{damaged[0]}, and no earlier checkpoint is intact")


def _checked_point(directory: str, tag: str) -> ResumePoint:
    """The checkpoint `tag` once its files match their record and its pickles are safe."""
    tag_dir = os.path.join(directory, tag)
    client_path = os.path.join(tag_dir, CLIENT_FILE)
    if not os.path.exists(client_path):
        raise DamagedCheckpointError(f"{client_path} missing: checkpoint {tag} is incomplete")
    try:
        client = CheckpointState.read(client_path)
    except json.JSONDecodeError as err:
        raise DamagedCheckpointError(f"{client_path} is damaged: not JSON ({err})") from err
    if problem := damage(tag_dir, client.files) or tokenizer_damage(tag_dir, client.vocab_sha256):
        raise DamagedCheckpointError(f"checkpoint {tag_dir} is damaged: {problem}")
    check_pickles(tag_dir)  # before DeepSpeed or we unpickle anything
    return ResumePoint(directory, tag, client)


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
    """Convert a ZeRO checkpoint for a new world size (rank 0 runs it); returns the new tag.

    The converter writes under a temporary name, renamed once it is complete and synced: an
    existing conversion is a finished one.
    """
    universal = f"{point.tag}{UNIVERSAL}"
    output = os.path.join(point.directory, universal)
    if dist.get_rank() == 0 and not os.path.exists(output):
        staging = output + PARTIAL
        new_directory(staging)  # an interrupted conversion's, or a planted link, removed
        subprocess.run(
            [
                sys.executable,
                "-m",
                "deepspeed.checkpoint.ds_to_universal",
                "--input_folder",
                os.path.join(point.directory, point.tag),
                "--output_folder",
                staging,
            ],
            check=True,
        )
        fsync_tree(staging)
        os.replace(staging, output)
        fsync(point.directory)
    dist.barrier()
    check_pickles(output)  # it may have come with the checkpoint rather than from the converter
    return universal


def restore(
    point: ResumePoint,
    universal: bool,
    engine,
    streams: TokenStreams,
    memory: MemoryBank,
    config: RunConfig,
    world: World,
    device: torch.device,
) -> RunState:
    """Load a checkpoint into the engine, stream position, memories and RNG; the run's state."""
    client = point.client
    check_resumable(point, config.train.global_rows, streams.manifest.vocab_sha256)
    tag = convert_to_universal(point) if universal else point.tag
    load_path, _ = engine.load_checkpoint(point.directory, tag=tag)
    if load_path is None:
        raise RuntimeError(f"DeepSpeed could not load checkpoint {point.directory}/{tag}")
    streams.load_state_dict(client.stream)
    rows, rng = load_memories(point, streams.rows, world.rank)
    memory.load_rows(rows, device)
    if rng is not None:
        set_rng_state(rng)
    else:
        torch.manual_seed(config.train.seed * 1000 + world.rank + client.step)
    if world.is_main:
        note = "optimizer via universal checkpoint" if universal else "exact"
        if client.world_size != world.world_size:
            note += "; dropout RNG re-seeded for the new world size"
        log.info(
            f"resumed {point.tag} at step {client.step} (saved on "
            f"{client.world_size} ranks, now {world.world_size}; {note})"
        )
    # The same SLURM job again is a requeue, unless the launcher restarted the ranks inside the
    # allocation (pretrain.sbatch's loop, torchrun): that is a restart only.
    job = os.environ.get("SLURM_JOB_ID")
    requeued = job is not None and job == client.slurm_job_id and restart_count() == 0
    return RunState(
        run_id=client.run_id or uuid.uuid4().hex[:12],
        step=client.step,
        restarts=client.restarts + 1,
        requeues=client.requeues + int(requeued),
    )
