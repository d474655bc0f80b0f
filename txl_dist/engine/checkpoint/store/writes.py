"""A save's files written to last, with the record of what was written: a snapshot's straight
from host memory with direct I/O, every file fsynced, sizes and CRC-32s from the bytes in memory
(nothing read back). Each is created anew, never through a link (txl_dist/files.py)."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from txl_dist.engine.checkpoint.snapshot.arena import HostFile
from txl_dist.engine.checkpoint.store.integrity import record_of
from txl_dist.files import NEW_FILE

O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux's; elsewhere every file goes through the page cache


def write_files(files: Mapping[str, bytes | HostFile]) -> dict[str, dict[str, Any]]:
    """Write each file (its bytes, or a snapshot's) to its path and fsync it; returns each
    one's size and CRC-32 by path."""
    written = {}
    for path, data in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        chunks = data.chunks if isinstance(data, HostFile) else [data]
        if not (isinstance(data, HostFile) and _written_directly(path, data)):
            _write_buffered(path, chunks)
        written[path] = record_of(chunks)
    return written


def _written_directly(path: str, host: HostFile) -> bool:
    """Write `host` to `path` with direct I/O: the page cache's fresh pages would cost the CPU
    more than the copy, time a background write takes from training. False where the
    filesystem refuses it (the file it began is removed, to be written again)."""
    if not O_DIRECT:
        return False
    try:
        fd = os.open(path, NEW_FILE | O_DIRECT, 0o666)
    except OSError as err:
        if err.errno == errno.EINVAL:
            return False
        raise
    try:
        for piece in host.pieces:
            _write_all(fd, piece.pages)  # whole pages: the last one's tail is cut below
        os.ftruncate(fd, host.size)
        os.fsync(fd)
    except OSError as err:
        if err.errno != errno.EINVAL:  # a filesystem that takes the flag, not the alignment
            raise
        os.unlink(path)
        return False
    finally:
        os.close(fd)
    return True


def _write_all(fd: int, data: np.ndarray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]  # releases the GIL


def _write_buffered(path: str, chunks: list[Any]) -> None:
    with os.fdopen(os.open(path, NEW_FILE, 0o666), "wb") as f:
        for chunk in chunks:
            f.write(chunk)  # releases the GIL
        f.flush()
        os.fsync(f.fileno())
