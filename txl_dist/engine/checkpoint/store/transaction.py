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

`SaveTransaction` holds the phases both kinds of save share and how the ranks agree;
`SynchronousSave` writes on the training thread (`run`), and an asynchronous save
(asynchronous.py) divides the phases between the training thread and a background one.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from txl_dist.checkpoint_names import CLIENT_FILE, LATEST
from txl_dist.engine.checkpoint.snapshot.background import save_to, serializing
from txl_dist.engine.checkpoint.state import (
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
    """The save of `state.step` by this rank, in phases every rank passes together: what a
    synchronous and an asynchronous save share (prepare, list, verify, publish, agreement)."""

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
    main_files: dict[str, bytes] = dataclasses.field(default_factory=dict)
    """Files rank 0 writes besides its states, by name in the checkpoint (tokenizer.json)."""
    group: Any = None
    """The process group the ranks agree over: None, the default one (a background save passes
    its own, so that its collectives never interleave with training's)."""

    @property
    def tag(self) -> str:
        return tag_for(self.state.step)

    @property
    def staging(self) -> str:
        return os.path.join(self.directory, self.tag + PARTIAL)

    @property
    def latest_staging(self) -> str:
        return os.path.join(self.directory, LATEST + PARTIAL)

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

    def _named(self, records: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Records by path, by name in the checkpoint."""
        return {os.path.relpath(path, self.staging): record for path, record in records.items()}

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


class SynchronousSave(SaveTransaction):
    """A save written on the training thread, which waits for it."""

    def run(self) -> str:
        """Write the complete checkpoint from every rank; returns its tag.

        Raises CheckpointSaveError on every rank if any rank fails (a full disk says so with
        `needed_bytes`); the partial directory is then removed.
        """
        self._together("prepare", self._prepare)
        written = self._together("write", self._write)
        return self._check_and_publish(written)

    def _write(self) -> dict[str, dict[str, Any]]:
        """This rank's DeepSpeed files and rank files, into the partial directory; returns the
        record of the files written from memory (rank 0's main files)."""
        own_directory(self.staging)
        with serializing(self.engine, deferred=False):
            self._save_deepspeed()
        for name, value in self.rank_files.items():
            save_to(value, os.path.join(self.staging, name))
        return self._named(write_files(self._main_files()))


def _out_of_space(err: BaseException | None) -> bool:
    """ENOSPC or EDQUOT anywhere in the chain (torch.save reports it as a bare RuntimeError)."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        err = err.__cause__ or err.__context__
    return False
