"""Reading a file that came from elsewhere: an export's, a checkpoint's, a run directory's.

The sender chose what each name holds: config.json may be a link to /dev/zero, a FIFO that
blocks open() (SIGTERM waits with it) or a 5 GB sparse file. Every reader of such a file opens
it here: a regular file only, opened without following a link (a link may lead anywhere, so
it is refused, never followed out of the directory), with O_NONBLOCK so a FIFO cannot block,
its size checked against a cap (limits.py) before a byte is read and again while reading.
A remote URL (fsspec) is streamed under the same cap.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Iterator
from typing import IO

import fsspec

from data_pipeline.limits import Limit
from data_pipeline.shards.errors import DataError

STRICT = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
GIVEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
BLOCK = 1 << 20


class ReceivedFileError(DataError, ValueError):
    """A received file refused: a link, not a regular file, over its cap, or not UTF-8."""


def open_received(path: str, limit: Limit | None, what: str, given: bool = False) -> IO[bytes]:
    """`path` opened for reading as the `what` it should be, or ReceivedFileError in one line.

    `given`: a path the user named on the command line (txl-eval --text): a link is followed
    and a pipe or device is read, under the cap all the same. `limit` None: a file read as a
    stream (received_lines), whatever its size."""
    try:
        fd = os.open(path, GIVEN if given else STRICT)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise ReceivedFileError(
            f"{path} is a link: a {what} is read only as a regular file of its own; copy the "
            "file itself there (cp -L) if you trust what it points to"
        ) from None
    try:
        info = os.fstat(fd)
        if not (given or stat.S_ISREG(info.st_mode)):
            raise ReceivedFileError(
                f"{path} is not a regular file (a FIFO, device or directory): not a {what}; "
                "replace it with the file itself"
            )
        if limit is not None and stat.S_ISREG(info.st_mode) and info.st_size > limit.value():
            raise too_large(path, limit, what)
        os.set_blocking(fd, True)  # O_NONBLOCK was for the open; a given pipe is read as one
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(f: IO[bytes], path: str, limit: Limit, what: str) -> bytes:
    """The bytes of an open file, ReceivedFileError once they pass the cap (a file that grew,
    a pipe, a device, a remote file): never more than a block past the cap in memory."""
    data = bytearray()
    for block in iter(functools.partial(f.read, BLOCK), b""):
        data += block
        if len(data) > limit.value():
            raise too_large(path, limit, what)
    return bytes(data)


def read_received(path: str, limit: Limit, what: str, given: bool = False) -> bytes:
    """The bytes of the received file `path` (open_received), under `limit`."""
    with open_received(path, limit, what, given) as f:
        return read_capped(f, path, limit, what)


def read_received_text(path: str, limit: Limit, what: str, given: bool = False) -> str:
    """The UTF-8 text of the received file `path` (open_received), under `limit`."""
    return decoded(read_received(path, limit, what, given), path, what)


def received_lines(path: str, limit: Limit, what: str) -> Iterator[bytes]:
    """The lines of the received file `path` (a JSONL log: any length) one at a time, each
    under `limit`."""
    with open_received(path, None, what) as f:
        while line := f.readline(limit.value() + 1):
            if len(line) > limit.value():
                raise ReceivedFileError(
                    f"{path} holds a line of more than {limit.named()} bytes: not a {what} "
                    "(raise the cap for a file you trust)"
                )
            yield line


def read_url(
    url: str, limit: Limit, what: str, storage_options: dict | None = None, given: bool = False
) -> bytes:
    """The bytes at `url`: a local path as read_received reads it (`given`: named on the
    command line), another URL streamed through fsspec under the same cap."""
    protocol, local = fsspec.core.split_protocol(url)
    if protocol in (None, "file", "local"):
        return read_received(local, limit, what, given)
    with fsspec.open(url, "rb", **(storage_options or {})) as f:
        return read_capped(f, url, limit, what)


def decoded(data: bytes, path: str, what: str) -> str:
    """`data` as UTF-8, or ReceivedFileError naming `path`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ReceivedFileError(f"{path} is not a {what} (not UTF-8 text: {err})") from None


def too_large(path: str, limit: Limit, what: str) -> ReceivedFileError:
    """The refusal of a file over `limit`."""
    return ReceivedFileError(
        f"{path} holds more than {limit.named()} bytes: not a {what} (raise the cap for a "
        "file you trust)"
    )
