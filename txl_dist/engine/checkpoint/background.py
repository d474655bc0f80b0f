"""Asynchronous saves (train.async_save): serialized on a thread while training goes on.

At the step boundary DeepSpeed's save runs as usual (its collectives included), but through
SerializingEngine, which keeps each state dict it is given instead of writing it. Those dicts
hold the live model and optimizer tensors, which nothing changes until the next optimizer update:
a thread serializes them into host memory while the next step's forward and backward run, and
the training thread waits for it only before that update (Checkpointer.before_update; the
"lazy" snapshot of DataStates-LLM). The thread then writes the files and finishes the
transaction (write, list, verify, publish), agreeing with the other ranks' threads over a
process group of its own, so that its collectives never interleave with training's. A
synchronous save writes through the same engine to its files, and both serialize through file
objects, so both leave identical files.

DeepSpeed's own asynchronous engines are not used: its decoupled and fast engines write
through deepspeed.io's FastFileWriter (the async_io op, libaio, not built for the CPU
accelerator), and DataStates is a separate package; neither runs our list / verify / publish
agreement before `latest` moves.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine


class SerializingEngine(TorchCheckpointEngine):
    """A DeepSpeed checkpoint engine that saves as `save_to` does, or keeps the state dicts."""

    def __init__(self, like: TorchCheckpointEngine, deferred: bool):
        self.__dict__.update(like.__dict__)  # the replaced engine's settings (serialization)
        self.kept: dict[str, Any] | None = {} if deferred else None  # state dicts by path

    def save(self, state_dict: Any, path: str) -> None:
        if self.kept is None:
            save_to(state_dict, path, self.zipfile_serialization)
        else:
            self.kept[path] = state_dict

    def serialized_files(self, arena: HostArena) -> dict[str, HostFile]:
        """The kept state dicts serialized into `arena`, by path: the bytes `save_to` would
        have written."""
        zipfile = self.zipfile_serialization
        return {path: serialized(value, arena, zipfile) for path, value in self.kept.items()}


def save_to(value: Any, path: str, zipfile: bool = True) -> None:
    """torch.save `value` to `path` through a file object: torch names the archive inside a
    file after the path, but one written through a file object or into memory "archive", so
    the bytes are those of `serialized`."""
    with open(path, "wb") as f:
        torch.save(value, f, _use_new_zipfile_serialization=zipfile)


ARENA_BLOCK_BYTES = 16 << 20  # a write spans blocks, so one size serves every storage
PAGE_BYTES = 4096


class HostArena:
    """Host memory that every snapshot of a run reuses, in blocks. Touching fresh pages costs
    more than copying into them (a page fault each, 1-2 s per GiB in a VM): `reserve` touches
    them on a thread at start-up, and later saves reuse them."""

    def __init__(self):
        self.blocks: list[np.ndarray] = []
        self._block = self._offset = 0
        self._reserving: threading.Thread | None = None

    @property
    def held(self) -> int:
        """Bytes this arena holds."""
        return len(self.blocks) * ARENA_BLOCK_BYTES

    def reserve(self, size: int) -> None:
        """Start taking and touching blocks for `size` bytes on a thread."""
        self._reserving = threading.Thread(target=self._grow, args=(size,), name="snapshot-arena")
        self._reserving.start()

    def _grow(self, size: int) -> None:
        while self.held < size:
            block = np.empty(ARENA_BLOCK_BYTES, np.uint8)
            block[::PAGE_BYTES] = 0  # a write to every page: the kernel maps them now
            self.blocks.append(block)

    def reuse(self) -> None:
        """Hand out the held memory again (the previous snapshot is written and dropped)."""
        if self._reserving is not None:
            self._reserving.join()
            self._reserving = None
        self._block = self._offset = 0

    def take(self, size: int) -> list[np.ndarray]:
        """`size` bytes not handed out since the last `reuse`, as pieces of blocks."""
        pieces = []
        while size:
            if self._block == len(self.blocks):
                self.blocks.append(np.empty(ARENA_BLOCK_BYTES, np.uint8))
            block = self.blocks[self._block]
            piece = block[self._offset : self._offset + size]
            pieces.append(piece)
            size -= piece.size
            self._offset += piece.size
            if self._offset == block.size:
                self._block, self._offset = self._block + 1, 0
        return pieces


class HostFile:
    """A file's bytes in host memory, as torch.save writes them, copied into `arena` with the
    GIL released: BytesIO copies holding it, which stalls the training thread for as long."""

    def __init__(self, arena: HostArena):
        self.arena = arena
        self.chunks: list[np.ndarray] = []

    def write(self, data: Any) -> int:
        source = np.frombuffer(data, np.uint8)
        start = 0
        for piece in self.arena.take(source.size):
            np.copyto(piece, source[start : start + piece.size])  # the GIL released
            start += piece.size
            self.chunks.append(piece)
        return source.size

    def flush(self) -> None:
        """Nothing to flush (torch.save may ask)."""


def serialized(value: Any, arena: HostArena, zipfile: bool = True) -> HostFile:
    """The bytes `save_to` writes for `value`, in `arena`."""
    host = HostFile(arena)
    torch.save(value, host, _use_new_zipfile_serialization=zipfile)
    return host


@contextmanager
def serializing(engine: Any, deferred: bool) -> Iterator[SerializingEngine]:
    """DeepSpeed's saves by `engine` go through SerializingEngine while inside."""
    writer = engine.checkpoint_engine
    serializer = SerializingEngine(writer, deferred)
    engine.checkpoint_engine = serializer
    try:
        yield serializer
    finally:
        engine.checkpoint_engine = writer


def write_files(files: Mapping[str, bytes | HostFile]) -> None:
    """Write each file (its bytes, or a snapshot's) to its path."""
    for path, data in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            for chunk in data.chunks if isinstance(data, HostFile) else [data]:
                f.write(chunk)  # a file's write releases the GIL


class BackgroundSave:
    """One save's background part on a thread: `work(serialized)` sets the event once the
    snapshot is serialized; `wait` returns once the work ended, raising its error."""

    def __init__(self, work: Callable[[threading.Event], Any]):
        self._error: BaseException | None = None
        self.serialized = threading.Event()
        """Set once the snapshot no longer reads the live tensors (or the work failed)."""
        self._thread = threading.Thread(target=self._run, args=(work,), name="checkpoint-save")
        self._thread.start()

    def _run(self, work: Callable[[threading.Event], Any]) -> None:
        try:
            work(self.serialized)
        except BaseException as err:  # noqa: BLE001 - raised again on the training thread
            self._error = err
        finally:
            self.serialized.set()  # a failed work must not hold the training thread

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
