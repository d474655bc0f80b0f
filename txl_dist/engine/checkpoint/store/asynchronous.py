"""An asynchronous save (train.async_save): the transaction's phases divided between the
training thread and a background one.

`prepare` and `snapshot` (DeepSpeed's state dicts of the live tensors, kept, and the rank files
serialized) run on the training thread; then `serialize` (the kept state dicts into host memory,
while the next step's forward and backward run), `write` (of the snapshot) to `publish` on a
background thread of the lowest priority (snapshot/background.py), agreeing over a process group
of its own. The files on disk and their atomicity are those of a synchronous save.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from typing import Any

from txl_dist.engine.checkpoint.snapshot.arena import HostArena, HostFile, serialized
from txl_dist.engine.checkpoint.snapshot.background import SerializingEngine, serializing
from txl_dist.engine.checkpoint.store.transaction import SaveTransaction
from txl_dist.engine.checkpoint.store.writes import write_files
from txl_dist.files import own_directory


@dataclass(kw_only=True)
class AsynchronousSave(SaveTransaction):
    """A save whose files are written in the background: `take_snapshot` on the training
    thread, then `complete` on the background one."""

    group: Any = dataclasses.field()  # required: not the base's default, training's group
    """The background saves' own process group (not the default one training uses)."""
    arena: HostArena
    """The host memory the snapshot serializes into (the run's, reused by each save)."""
    _snapshot_files: dict[str, bytes | HostFile] = dataclasses.field(
        default_factory=dict, init=False
    )
    """This rank's files, by path, serialized for `complete` to write."""
    _kept: SerializingEngine | None = dataclasses.field(default=None, init=False)
    """DeepSpeed's state dicts kept by `take_snapshot`, serialized by `complete`."""

    def take_snapshot(self) -> None:
        """The training thread's part: DeepSpeed's state dicts kept (valid until the next
        optimizer update) and the rank files serialized. Raises CheckpointSaveError on every
        rank if any rank fails."""
        self._together("prepare", self._prepare)
        self._together("snapshot", self._snapshot)

    def complete(self, serialized: threading.Event) -> str:
        """The background part, after `take_snapshot`: serialize the kept state dicts into host
        memory, set `serialized` (the next optimizer update may run), write the snapshot, then
        list, verify and publish as a synchronous save; returns the tag. Raises
        CheckpointSaveError on every rank if any rank fails (BackgroundSave then sets
        `serialized`)."""
        self._together("serialize", self._serialize, serialized)
        written = self._together("write", self._write_snapshot)
        return self._check_and_publish(written)

    def _snapshot(self) -> None:
        """DeepSpeed's state dicts kept; the rank files (the next forward replaces the
        memories) serialized into the snapshot."""
        with serializing(self.engine, deferred=True) as kept:
            self._save_deepspeed()
        self._kept = kept
        self.arena.reuse()  # the previous save, if any, is written: its snapshot is dropped
        rank_files = {
            os.path.join(self.staging, name): serialized(value, self.arena)
            for name, value in self.rank_files.items()
        }
        self._snapshot_files = {**rank_files, **self._main_files()}

    def _serialize(self, serialized: threading.Event) -> None:
        """The kept state dicts serialized into the snapshot, beside the rank files; then this
        rank's next update may run, without waiting for the other ranks' serialization (their
        updates change only their own tensors, and this rank's through its collectives)."""
        self._snapshot_files.update(self._kept.serialized_files(self.arena))
        self._kept = None
        serialized.set()

    def _write_snapshot(self) -> dict[str, dict[str, Any]]:
        """This rank's snapshot, into the partial directory; returns the record of its files."""
        own_directory(self.staging)
        snapshot, self._snapshot_files = self._snapshot_files, {}
        return self._named(write_files(snapshot))
