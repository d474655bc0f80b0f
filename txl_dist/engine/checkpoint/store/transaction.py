"""One save as a transaction of every rank: it is published whole or not at all.

Its phases, each passed by every rank together:

    prepare  rank 0 clears what an earlier failed save of this step left
    write    every rank writes its DeepSpeed files and its rank files into
             global_stepN.partial/, rank 0 also the main files (the data's tokenizer.json)
    list     every rank lists the files there
    verify   every rank fsyncs and reads its share of the files no rank wrote from memory, and
             records their sizes and CRC-32s (a file written from memory is fsynced and
             recorded as it is written)
    publish  rank 0 writes the record (txl.json), renames the directory to global_stepN and
             only then replaces `latest`

After each phase the ranks agree (an all-gather of every rank's outcome): if any rank failed,
every rank removes the partial directory and raises CheckpointSaveError, and `latest` still
names the previous checkpoint. A kill at any moment leaves `latest` naming a complete one.

An asynchronous save (background.py) divides them: `prepare` and `snapshot` (DeepSpeed's state
dicts of the live tensors, kept, and the rank files serialized) on the training thread, then
`serialize` (the kept state dicts into host memory, while the next step's forward and backward
run), `write` (of the snapshot) to `publish` on a background thread of the lowest priority,
agreeing over a process group of its own.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from txl_dist.engine.checkpoint.snapshot.arena import HostArena, HostFile, serialized
from txl_dist.engine.checkpoint.snapshot.background import (
    SerializingEngine,
    save_to,
    serializing,
)
from txl_dist.engine.checkpoint.state import (
    CLIENT_FILE,
    LATEST,
    PARTIAL,
    UNIVERSAL,
    CheckpointState,
    read_latest,
    tag_for,
)
from txl_dist.engine.checkpoint.store.integrity import (
    digests,
    files_under,
    fsync,
    write_synced,
)
from txl_dist.engine.checkpoint.store.writes import write_files
from txl_dist.files import new_directory, own_directory, remove
from txl_dist.process.preflight import DiskRoom

# DeepSpeed's ds_to_universal refuses checkpoints whose client state lacks this.
UNIVERSAL_INFO = {"universal_checkpoint_info": {"universal_checkpoint_version": 0.2}}


class CheckpointSaveError(RuntimeError):
    """A save failed on some rank; every rank raises it and `latest` still names the last one."""


@dataclass
class SaveTransaction:
    """The save of `state.step` by this rank, in phases every rank passes together."""

    engine: Any
    """The DeepSpeed engine whose model and optimizer states are saved."""
    directory: str
    """The checkpoints directory."""
    state: CheckpointState
    """What txl.json records (its `files` are filled in by the save)."""
    rank_files: dict[str, Any]
    """What this rank torch.saves besides DeepSpeed's files, by name in the checkpoint."""
    needed_bytes: float
    """An estimate of one checkpoint's size, for the message when the disk is full."""
    after_phase: Callable[[str, int], None] | None = None
    """Called with each phase's name and the step once every rank has passed it (tests stop
    or kill ranks there)."""
    group: Any = None
    """The process group the ranks agree over: None, the default one; a background save's
    own, so that its collectives never interleave with training's."""
    main_files: dict[str, bytes] = dataclasses.field(default_factory=dict)
    """Files rank 0 writes besides its states, by name in the checkpoint (tokenizer.json)."""
    snapshot: dict[str, bytes | HostFile] = dataclasses.field(default_factory=dict)
    """This rank's files, by path, serialized for `complete` to write."""
    arena: HostArena | None = None
    """The host memory an asynchronous save serializes into (the run's, reused by each save)."""
    kept: SerializingEngine | None = None
    """DeepSpeed's state dicts kept by `take_snapshot`, serialized by `complete`."""

    @property
    def tag(self) -> str:
        return tag_for(self.state.step)

    @property
    def staging(self) -> str:
        return os.path.join(self.directory, self.tag + PARTIAL)

    @property
    def latest_staging(self) -> str:
        return os.path.join(self.directory, LATEST + PARTIAL)

    def run(self) -> str:
        """Write the complete checkpoint from every rank; returns its tag.

        Raises CheckpointSaveError on every rank if any rank fails (a full disk says so with
        `needed_bytes`); the partial directory is then removed.
        """
        self._together("prepare", self._prepare)
        written = self._together("write", self._write)
        return self._check_and_publish(written)

    def take_snapshot(self) -> None:
        """The training thread's part of an asynchronous save: DeepSpeed's state dicts kept
        (valid until the next optimizer update) and the rank files serialized. Raises
        CheckpointSaveError on every rank if any rank fails."""
        self._together("prepare", self._prepare)
        self._together("snapshot", self._snapshot)

    def complete(self, serialized: threading.Event) -> str:
        """The background part of an asynchronous save, after `take_snapshot`: serialize the
        kept state dicts into host memory, set `serialized` (the next optimizer update may
        run), write the snapshot, then as `run`; returns the tag. Raises CheckpointSaveError on
        every rank if any rank fails (BackgroundSave then sets `serialized`)."""
        self._together("serialize", self._serialize, serialized)
        written = self._together("write", self._write_snapshot)
        return self._check_and_publish(written)

    def _check_and_publish(self, written: list[dict[str, dict[str, Any]]]) -> str:
        """The list, verify and publish phases, once every rank's files are written; `written`:
        each rank's record of the files it wrote from memory (fsynced, nothing to read back)."""
        # Each rank sees at least its own files (a shared filesystem may cache listings per node).
        listings = self._together("list", files_under, self.staging)
        names = sorted(set().union(*listings))
        known = {name: record for records in written for name, record in records.items()}
        unread = [name for name in names if name not in known]
        shares = self._together("verify", self._verify_share, unread)
        read = (item for share in shares for item in share.items())
        files = dict(sorted([*known.items(), *read]))
        self._together("publish", self._publish, files)
        return self.tag

    # ---- the phases ----

    def _prepare(self) -> None:
        """Rank 0 makes the partial directory anew, ours: what held the name (a failed save of
        the same step, a planted link) is removed, not followed."""
        if dist.get_rank() == 0:
            os.makedirs(self.directory, exist_ok=True)
            new_directory(self.staging)

    def _write(self) -> dict[str, dict[str, Any]]:
        """This rank's DeepSpeed files and rank files, into the partial directory; returns the
        record of the files written from memory (rank 0's main files)."""
        own_directory(self.staging)
        with serializing(self.engine, deferred=False):
            self._save_deepspeed()
        for name, value in self.rank_files.items():
            save_to(value, os.path.join(self.staging, name))
        return self._named(write_files(self._main_files()))

    def _write_snapshot(self) -> dict[str, dict[str, Any]]:
        """This rank's snapshot, into the partial directory; returns the record of its files."""
        own_directory(self.staging)
        snapshot, self.snapshot = self.snapshot, {}
        return self._named(write_files(snapshot))

    def _named(self, records: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Records by path, by name in the checkpoint."""
        return {os.path.relpath(path, self.staging): record for path, record in records.items()}

    def _snapshot(self) -> None:
        """DeepSpeed's state dicts kept; the rank files (the next forward replaces the
        memories) serialized into `snapshot`."""
        with serializing(self.engine, deferred=True) as kept:
            self._save_deepspeed()
        self.kept = kept
        self.arena.reuse()  # the previous save, if any, is written: its snapshot is dropped
        rank_files = {
            os.path.join(self.staging, name): serialized(value, self.arena)
            for name, value in self.rank_files.items()
        }
        self.snapshot = {**rank_files, **self._main_files()}

    def _serialize(self, serialized: threading.Event) -> None:
        """The kept state dicts serialized into `snapshot`, beside the rank files; then this
        rank's next update may run, without waiting for the other ranks' serialization (their
        updates change only their own tensors, and this rank's through its collectives)."""
        self.snapshot.update(self.kept.serialized_files(self.arena))
        self.kept = None
        serialized.set()

    def _save_deepspeed(self) -> None:
        """DeepSpeed's save of the model and optimizer into the partial directory."""
        client = {**dataclasses.asdict(self.state), **UNIVERSAL_INFO}
        partial = os.path.basename(self.staging)
        try:
            self.engine.save_checkpoint(
                self.directory, tag=partial, client_state=client, save_latest=False
            )
        except Exception:
            # DeepSpeed's save ends with a barrier, which this rank skipped by failing in a write
            # (its collectives come before them); take it so the ranks stay in step.
            dist.barrier()
            raise

    def _main_files(self) -> dict[str, bytes]:
        """`main_files` by path in the partial directory on rank 0; nothing on the others."""
        if dist.get_rank() != 0:
            return {}
        return {os.path.join(self.staging, name): data for name, data in self.main_files.items()}

    def _verify_share(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Fsync and read this rank's share of `names` (every world_size-th) and record them."""
        share = names[dist.get_rank() :: dist.get_world_size()]
        return digests(self.staging, share, sync=True)

    def _publish(self, files: dict[str, dict[str, Any]]) -> None:
        """Rank 0 records the files, then makes the checkpoint visible and points `latest` at it."""
        if dist.get_rank() != 0:
            return
        final = os.path.join(self.directory, self.tag)
        record = dataclasses.replace(self.state, files=files)
        write_synced(os.path.join(self.staging, CLIENT_FILE), record.to_json())
        write_synced(self.latest_staging, self.tag)
        fsync(self.staging)
        # Nothing from here on needs space. A checkpoint of this step saved before (the run
        # was resumed from an earlier one) is replaced, and so is its conversion.
        for stale in (final, final + UNIVERSAL):
            remove(stale)  # a planted link as itself
        os.replace(self.staging, final)
        os.replace(self.latest_staging, os.path.join(self.directory, LATEST))
        fsync(self.directory)

    # ---- how the ranks agree ----

    def _together(self, phase: str, work: Callable[..., Any], *args: Any) -> list[Any]:
        """Run `work(*args)` here and gather every rank's result; if any rank failed, undo and
        raise on every rank."""
        try:
            outcome = (work(*args), None, False)
        except Exception as err:  # noqa: BLE001 - every failure ends the save on every rank
            outcome = (None, f"{type(err).__name__}: {err}", _out_of_space(err))
        outcomes = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, outcome, group=self.group)
        failed = [(rank, error, full) for rank, (_, error, full) in enumerate(outcomes) if error]
        if failed:
            self._undo()
            rank, error, _ = failed[0]
            out_of_space = any(full for _, _, full in failed)
            raise CheckpointSaveError(self._failure(rank, error, out_of_space))
        if self.after_phase is not None:
            self.after_phase(phase, self.state.step)
        return [value for value, _, _ in outcomes]

    def _undo(self) -> None:
        """Remove what this save wrote; every rank waits for it, then `latest` is as before."""
        if dist.get_rank() == 0:
            shutil.rmtree(self.staging, ignore_errors=True)
            if os.path.exists(self.latest_staging):
                os.remove(self.latest_staging)
        dist.barrier(group=self.group)

    def _failure(self, rank: int, error: str, out_of_space: bool) -> str:
        """The one line that ends the run."""
        if os.path.exists(os.path.join(self.directory, LATEST)):
            kept = f"{LATEST} still names {read_latest(self.directory)}"
        else:
            kept = "no earlier checkpoint"
        room = DiskRoom.of(self.directory, self.needed_bytes)
        if out_of_space or room.short:
            return (
                f"no space left in {self.directory} for checkpoint {self.tag}: {room}; free space "
                f"or move train.out_dir, then continue with --resume auto ({kept})"
            )
        where = f"checkpoint {self.tag} in {self.directory}"
        return f"saving {where} failed on rank {rank}: {error} ({kept})"


def _out_of_space(err: BaseException | None) -> bool:
    """ENOSPC or EDQUOT anywhere in the chain (torch.save reports it as a bare RuntimeError)."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        err = err.__cause__ or err.__context__
    return False
