"""Asynchronous saves (train.async_save): serialized on a thread while training goes on.

At the step boundary DeepSpeed's save runs as usual (its collectives included), but through
SerializingEngine, which keeps each state dict it is given instead of writing it. Those dicts
hold the live model and optimizer tensors, which nothing changes until the next optimizer update:
a thread serializes them into host memory while the next step's forward and backward run, and
the training thread waits for it only before that update (Checkpointer.before_update; the
"lazy" snapshot of DataStates-LLM). The thread then writes the files from host memory with
direct I/O (writes.py) and finishes the transaction (write, list, verify, publish), agreeing
with the other ranks' threads over a process group of its own, so that its collectives never
interleave with training's. It runs at the lowest priority: on the cores training leaves idle
(all of a rank's, while its update waits for the serialization). A
synchronous save writes through the same engine to its files, and both serialize through file
objects, so both leave identical files.

DeepSpeed's own asynchronous engines are not used: its decoupled and fast engines write
through deepspeed.io's FastFileWriter (the async_io op, libaio, not built for the CPU
accelerator), and DataStates is a separate package; neither runs our list / verify / publish
agreement before `latest` moves.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

from txl_dist.engine.checkpoint.snapshot.arena import HostArena, HostFile, serialized, torch_save


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
        torch_save(value, f, zipfile)


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


WRITER_NICENESS = 19  # the lowest: the thread runs on what training leaves idle, and still
# advances a little where training leaves nothing (SCHED_IDLE could starve it for as long as
# that lasts, while its peers wait in the save's collectives)


def yield_cores() -> None:
    """This thread runs from now on at the lowest priority. On Linux, where each thread has
    its own niceness (elsewhere setpriority would lower the whole process: nothing done)."""
    if sys.platform.startswith("linux"):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)


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
            yield_cores()
            work(self.serialized)
        except BaseException as err:  # noqa: BLE001 - raised again on the training thread
            self._error = err
        finally:
            self.serialized.set()  # a failed work must not hold the training thread

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
