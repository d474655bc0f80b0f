"""Asynchronous saves (train.async_save): a snapshot in host memory, written on a thread.

At the step boundary DeepSpeed's save runs as usual (its collectives included), but through
SerializingEngine, which serializes each state dict into bytes in host memory instead of writing
it. A synchronous save writes through the same engine to its files, and both serialize through
file objects, so both leave identical files. A thread then
writes them and finishes the transaction (write, list, verify, publish), agreeing with the other
ranks' threads over a process group of its own, so that its collectives never interleave with
training's.

DeepSpeed's own asynchronous engines are not used: its decoupled and fast engines write
through deepspeed.io's FastFileWriter (the async_io op, libaio, not built for the CPU
accelerator), and DataStates is a separate package; neither runs our list / verify / publish
agreement before `latest` moves.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine


class SerializingEngine(TorchCheckpointEngine):
    """A DeepSpeed checkpoint engine that saves as `save_to` does, or into host memory."""

    def __init__(self, like: TorchCheckpointEngine, in_memory: bool):
        self.__dict__.update(like.__dict__)  # the replaced engine's settings (serialization)
        self.files: dict[str, bytes] | None = {} if in_memory else None  # by path, in memory

    def save(self, state_dict: Any, path: str) -> None:
        if self.files is None:
            save_to(state_dict, path, self.zipfile_serialization)
        else:
            self.files[path] = serialized(state_dict, self.zipfile_serialization)


def save_to(value: Any, path: str, zipfile: bool = True) -> None:
    """torch.save `value` to `path` through a file object: torch names the archive inside a
    file after the path, but one written through a file object or into memory "archive", so
    the bytes are those of `serialized`."""
    with open(path, "wb") as f:
        torch.save(value, f, _use_new_zipfile_serialization=zipfile)


def serialized(value: Any, zipfile: bool = True) -> bytes:
    """The bytes `save_to` writes for `value`."""
    buffer = io.BytesIO()
    torch.save(value, buffer, _use_new_zipfile_serialization=zipfile)
    return buffer.getvalue()


@contextmanager
def serializing(engine: Any, in_memory: bool) -> Iterator[SerializingEngine]:
    """DeepSpeed's saves by `engine` go through SerializingEngine while inside."""
    writer = engine.checkpoint_engine
    serializer = SerializingEngine(writer, in_memory)
    engine.checkpoint_engine = serializer
    try:
        yield serializer
    finally:
        engine.checkpoint_engine = writer


def write_files(files: dict[str, bytes]) -> None:
    """Write each snapshot file to its path."""
    for path, data in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


class BackgroundSave:
    """One save's background part on a thread; `wait` returns once it ended, raising its error."""

    def __init__(self, work: Any):
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="checkpoint-save")
        self._thread.start()

    def _run(self, work: Any) -> None:
        try:
            work()
        except BaseException as err:  # noqa: BLE001 - raised again on the training thread
            self._error = err

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
