"""Files that last and match their record: fsync, every file's size and CRC-32, and how a
checkpoint on disk differs from what its txl.json records."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from isal import isal_zlib

from data_pipeline import TOKENIZER_FILE
from data_pipeline.limits import TOKENIZER_BYTES
from data_pipeline.received import read_received
from txl_dist.checkpoint_names import CLIENT_FILE
from txl_dist.files import open_new

DIGEST_CHUNK = 16 << 20
# Reads and fsyncs release the GIL (a chunk's CRC-32 holds it briefly): files are checked in
# parallel.
DIGEST_THREADS = 4


class DamagedCheckpointError(FileNotFoundError):
    """A checkpoint is incomplete or its files differ from their record; the message names one."""


def damage(tag_dir: str, files: dict[str, dict[str, Any]]) -> str | None:
    """How the files in `tag_dir` differ from their record, or None if they match.

    Sizes first, so a truncated file shows without reading anything; then every CRC-32.
    Checkpoints saved before txl-dist recorded their files have no record: nothing to check.
    """
    for name, recorded in files.items():
        path = os.path.join(tag_dir, name)
        if os.path.isabs(name) or os.path.normpath(name).startswith(".."):
            return f"{CLIENT_FILE} records {name!r}, a path outside the checkpoint"
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return f"{name} is missing"
        if not stat.S_ISREG(info.st_mode):
            return f"{name} is not a regular file"
        if info.st_size != recorded["bytes"]:
            return f"{name} has {info.st_size} bytes, {CLIENT_FILE} records {recorded['bytes']}"
    found = digests(tag_dir, list(files), sync=False)
    for name, recorded in files.items():
        if found[name]["crc32"] != recorded["crc32"]:
            return (
                f"{name} has CRC-32 {found[name]['crc32']}, {CLIENT_FILE} records "
                f"{recorded['crc32']}"
            )
    return None


def tokenizer_damage(tag_dir: str, vocab_sha256: str) -> str | None:
    """How the checkpoint's tokenizer.json differs from the vocab_sha256 its txl.json records,
    or None if it matches or there is none (word and character data). Its CRC-32 in the record
    proves no more than the record does: the sha256 ties it to what the run trained on."""
    path = os.path.join(tag_dir, TOKENIZER_FILE)
    if not os.path.lexists(path):
        return None
    if not stat.S_ISREG(os.lstat(path).st_mode):
        return f"{TOKENIZER_FILE} is not a regular file"
    found = hashlib.sha256(read_received(path, TOKENIZER_BYTES, "tokenizer file")).hexdigest()
    if found != vocab_sha256:
        return (
            f"{TOKENIZER_FILE} has sha256 {found[:12]}, {CLIENT_FILE} records vocab_sha256 "
            f"{vocab_sha256[:12]}: not the tokenizer it was trained with"
        )
    return None


def digests(root: str, names: list[str], sync: bool) -> dict[str, dict[str, Any]]:
    """Size and CRC-32 of each file (fsynced too if `sync`), read in parallel."""
    with ThreadPoolExecutor(DIGEST_THREADS) as pool:
        found = pool.map(lambda name: _digest(os.path.join(root, name), sync), names)
        return dict(zip(names, found))


def _digest(path: str, sync: bool) -> dict[str, Any]:
    with open(path, "rb") as f:
        record = record_of(iter(lambda: f.read(DIGEST_CHUNK), b""))
        if sync:  # flushes the file whichever process wrote it
            os.fsync(f.fileno())
    return record


def record_of(chunks: Iterable[Any]) -> dict[str, Any]:
    """The size and CRC-32 of a file's bytes, given in chunks (bytes or arrays of bytes)."""
    crc, size = 0, 0
    for chunk in chunks:
        crc = isal_zlib.crc32(chunk, crc)  # zlib's CRC-32, by ISA-L: several times as fast
        size += memoryview(chunk).nbytes
    return {"bytes": size, "crc32": f"{crc:08x}"}


def files_under(root: str) -> list[str]:
    """Paths of every file under `root`, relative to it, sorted (the same list on every rank)."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _, names in os.walk(root)
        for name in names
    )


def write_synced(path: str, text: str) -> None:
    """A new file holding `text`, made durable (whatever held the name is replaced, a planted
    link never written through)."""
    with open_new(path) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def fsync(path: str) -> None:
    """Make a file's data, or a directory's entries (new files, renames), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str) -> None:
    """Make every file and directory entry under `root` durable."""
    for folder, _, names in os.walk(root):
        for name in names:
            fsync(os.path.join(folder, name))
        fsync(folder)
