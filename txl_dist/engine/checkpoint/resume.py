"""Resuming: find a complete, intact and safe checkpoint, check it can continue this run, and
load every part of it (parts/) into the run."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from data_pipeline.limits import TOKENIZER_BYTES
from data_pipeline.received import ReceivedFileError, read_received
from data_pipeline.streams import StreamStateError
from txl_dist.checkpoint_names import CHECKPOINT_DIR, CLIENT_FILE, LATEST
from txl_dist.engine.checkpoint.parts import CheckpointPart, Location, Place, RunState, rank_file
from txl_dist.engine.checkpoint.state import (
    PARTIAL,
    UNIVERSAL,
    CheckpointState,
    read_latest,
    step_of,
    tags_in,
)
from txl_dist.engine.checkpoint.store.integrity import (
    DamagedCheckpointError,
    damage,
    fsync,
    fsync_tree,
    tokenizer_damage,
)
from txl_dist.engine.checkpoint.store.trusted import check_pickles, load_trusted
from txl_dist.files import new_directory
from txl_dist.logs import ranks
from txl_dist.process.dist import World
from txl_dist.schema import ConfigError

log = logging.getLogger(__name__)

MEMORY_FILE = re.compile(r"^memory_rank\d+\.pt$")  # every rank's (parts/memory.py)


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
    tags = [latest, *(name for _, name in reversed(earlier))]
    point, damaged = first_intact(directory, tags, "resuming from")
    if point is None:
        raise DamagedCheckpointError(f"{damaged[0]}, and no earlier checkpoint is intact")
    return point


def first_intact(
    directory: str, tags: list[str], going_to: str
) -> tuple[ResumePoint | None, list[str]]:
    """The first of `tags` that _checked_point accepts (None if none), and why each one before
    it was passed over; its passed_over says so, ending "`going_to` TAG"."""
    damaged = []
    for tag in tags:
        try:
            point = _checked_point(directory, tag)
        except DamagedCheckpointError as err:
            damaged.append(str(err))
            continue
        point.passed_over = [f"{reason}: {going_to} {tag}" for reason in damaged]
        return point, damaged
    return None, damaged


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
    except ReceivedFileError as err:  # a link, FIFO or oversized file in its place
        raise DamagedCheckpointError(f"checkpoint {tag_dir} is damaged: {err}") from err
    except OSError as err:  # e.g. no read permission, or a socket: no record to go by
        reason = err.strerror or err
        raise DamagedCheckpointError(
            f"{client_path} is unreadable ({reason}): checkpoint {tag} is damaged"
        ) from err
    try:
        problem = (
            damage(tag_dir, client.files)
            or tokenizer_damage(tag_dir, client.vocab_sha256)
            or world_size_damage(tag_dir, client.world_size)
        )
    except ReceivedFileError as err:  # a link, FIFO or oversized file where a file should be
        problem = str(err)
    if problem:
        raise DamagedCheckpointError(f"checkpoint {tag_dir} is damaged: {problem}")
    check_pickles(tag_dir)  # before DeepSpeed or we unpickle anything
    return ResumePoint(directory, tag, client)


def world_size_damage(tag_dir: str, world_size: object) -> str | None:
    """How txl.json's world_size disagrees with the ranks' files, or None; checked before
    anything makes a list of that many ranks. Every rank saves its memory file (checkpoints
    from before they existed: at least one file of its own)."""
    names = os.listdir(tag_dir)
    memory = sum(1 for name in names if MEMORY_FILE.match(name))
    most = memory or len(names)
    number = isinstance(world_size, int) and not isinstance(world_size, bool)
    if number and 1 <= world_size <= most and world_size == (memory or world_size):
        return None
    return f"{CLIENT_FILE} records world_size {world_size!r}, its files are those of {ranks(most)}"


def needs_universal(point: ResumePoint | None, world_size: int, zero_stage: int) -> bool:
    """A ZeRO checkpoint from another world size loads only via DeepSpeed's universal format."""
    return point is not None and point.client.world_size != world_size and zero_stage > 0


def check_resumable(
    point: ResumePoint, global_rows: int, vocab_sha256: str, eos_token: str | None = None
) -> None:
    """Raise ConfigError if the checkpoint cannot continue a run with these rows and data (its
    vocabulary, and the end-of-text token where the checkpoint records one)."""
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
            f"{saved.vocab_sha256[:12]}, this run's data has {vocab_sha256[:12]}: resume on the "
            "data it was trained on, or prepare this data with the checkpoint's vocabulary "
            "(txl-prepare --vocab FILE) or tokenizer (--tokenizer FILE, for subword data)"
        )
    if saved.eos_token is not None and saved.eos_token != eos_token:
        raise ConfigError(
            f"checkpoint {point.tag} was trained on documents ending in {saved.eos_token!r}, "
            f"this run's data ends them in {eos_token!r}: resume on the data it was trained on, "
            f"or prepare this data with --eos-token {saved.eos_token!r}"
        )


def rank_states(point: ResumePoint, name: str) -> list[Any] | None:
    """Every saved rank's state of the RANK_FILE part `name`; None where the checkpoint was
    saved before the part existed."""
    tag_dir = os.path.join(point.directory, point.tag)
    if not os.path.exists(os.path.join(tag_dir, rank_file(name, 0))):
        return None
    ranks = range(point.client.world_size)  # checked against the files (world_size_damage)
    return [load_trusted(os.path.join(tag_dir, rank_file(name, r))) for r in ranks]


def main_file(point: ResumePoint, name: str) -> bytes | None:
    """The bytes of the MAIN_FILE part `name`; None where the checkpoint lacks it."""
    path = os.path.join(point.directory, point.tag, name)
    if not os.path.lexists(path):
        return None
    return read_received(path, TOKENIZER_BYTES, name)  # tokenizer.json: the one MAIN_FILE part


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
    point: ResumePoint, universal: bool, parts: list[CheckpointPart], run: RunState, world: World
) -> None:
    """Load a checkpoint into `run` (its id and step) and into every part; a part the checkpoint
    was saved without gets None."""
    client = point.client
    tag = convert_to_universal(point) if universal else point.tag
    run.run_id, run.step = client.run_id or run.run_id, client.step
    load_parts(point, tag, parts)
    if world.is_main:
        note = "optimizer via universal checkpoint" if universal else "exact"
        if client.world_size != world.world_size:
            note += "; dropout RNG re-seeded for the new world size"
        log.info(
            f"resumed {point.tag} at step {client.step} (saved on "
            f"{ranks(client.world_size)}, now {world.world_size}; {note})"
        )


def load_parts(point: ResumePoint, tag: str, parts: list[CheckpointPart]) -> None:
    """Load checkpoint `point` into each of `parts` (DeepSpeed's files from `tag`); also a
    rollback's, which restores the parts of a run under way (engine/health/rollback.py)."""
    for part in parts:
        try:
            part.load_state_dict(_state_of(point, part, tag))
        except StreamStateError as err:  # a received checkpoint's numbers, refused: name where
            where = os.path.join(point.directory, point.tag, CLIENT_FILE)
            raise DamagedCheckpointError(f"{where}: parts.{part.name}: {err}") from None


def _state_of(point: ResumePoint, part: CheckpointPart, tag: str) -> Any:
    """`part`'s saved state, from where its place says (DeepSpeed's from `tag`)."""
    if part.place is Place.RECORD:
        return point.client.parts.get(part.name)
    if part.place is Place.RANK_FILE:
        return rank_states(point, part.name)
    if part.place is Place.MAIN_FILE:
        return main_file(point, part.name)
    return Location(point.directory, tag)
