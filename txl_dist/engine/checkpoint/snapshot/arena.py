"""An asynchronous save's host memory: torch.save's bytes in page-aligned blocks a run reuses.

Every file starts on a page and owns the rest of its last page, so a file is written straight
from here with direct I/O (writes.py): whole pages, then cut to its size.
"""

from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

ARENA_BLOCK_BYTES = 16 << 20  # a file spans blocks, so one size serves every storage
PAGE_BYTES = 4096  # direct I/O's alignment of memory, offsets and lengths on every disk we know


def _page_aligned(size: int) -> int:
    return -(-size // PAGE_BYTES) * PAGE_BYTES


@dataclass(frozen=True)
class Piece:
    """A run of bytes in one of the arena's blocks."""

    block: np.ndarray
    start: int
    stop: int

    @property
    def bytes(self) -> np.ndarray:
        return self.block[self.start : self.stop]

    @property
    def pages(self) -> np.ndarray:
        """The piece up to the end of its last page (the arena keeps that page for it)."""
        return self.block[self.start : _page_aligned(self.stop)]


class HostArena:
    """Host memory that every snapshot of a run reuses, in blocks. Touching fresh pages costs
    more than copying into them (a page fault each): `reserve` touches them on a thread once
    training has room for them, and later saves reuse them."""

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
            block = _new_block()
            block[::PAGE_BYTES] = 0  # a write to every page: the kernel maps them now
            self.blocks.append(block)

    def reuse(self) -> None:
        """Hand out the held memory again (the previous snapshot is written and dropped)."""
        if self._reserving is not None:
            self._reserving.join()
            self._reserving = None
        self._block = self._offset = 0

    def take(self, size: int) -> list[Piece]:
        """`size` bytes not handed out since the last `reuse`, as pieces of blocks."""
        pieces = []
        while size:
            if self._block == len(self.blocks):
                self.blocks.append(_new_block())
            block = self.blocks[self._block]
            stop = min(block.size, self._offset + size)
            pieces.append(Piece(block, self._offset, stop))
            size -= stop - self._offset
            self._offset = stop
            if self._offset == block.size:
                self._block, self._offset = self._block + 1, 0
        return pieces

    def to_page(self) -> None:
        """Skip to the next page: the next bytes taken start one (and the last ones own the
        rest of theirs)."""
        self._offset = _page_aligned(self._offset)
        if self._offset == ARENA_BLOCK_BYTES:
            self._block, self._offset = self._block + 1, 0


def _new_block() -> np.ndarray:
    """A block of anonymous memory: page-aligned, as direct I/O needs."""
    return np.frombuffer(mmap.mmap(-1, ARENA_BLOCK_BYTES), np.uint8)


class HostFile:
    """A file's bytes in host memory, as torch.save writes them, copied into `arena` with the
    GIL released: BytesIO copies holding it, which stalls the training thread for as long."""

    def __init__(self, arena: HostArena):
        self.arena = arena
        self.pieces: list[Piece] = []
        self.size = 0

    def write(self, data: Any) -> int:
        source = np.frombuffer(data, np.uint8)
        start = 0
        for piece in self.arena.take(source.size):
            np.copyto(piece.bytes, source[start : start + piece.stop - piece.start])
            start += piece.stop - piece.start
            self._extend(piece)
        self.size += source.size
        return source.size

    def _extend(self, piece: Piece) -> None:
        """Add `piece`, joined to the last if it goes on from it: each piece but the first then
        starts a block and each but the last ends one, whole pages for direct I/O."""
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last.block is piece.block and last.stop == piece.start:
            self.pieces[-1] = Piece(piece.block, last.start, piece.stop)
        else:
            self.pieces.append(piece)

    def flush(self) -> None:
        """Nothing to flush (torch.save may ask)."""

    @property
    def chunks(self) -> list[np.ndarray]:
        """The file's bytes, in order."""
        return [piece.bytes for piece in self.pieces]


def serialized(value: Any, arena: HostArena, zipfile: bool = True) -> HostFile:
    """The bytes torch.save writes for `value` to a file object, in `arena`. Each file ends by
    skipping to the next page, so each starts on one."""
    host = HostFile(arena)
    torch_save(value, host, zipfile)
    arena.to_page()
    return host


def torch_save(value: Any, file: Any, zipfile: bool = True) -> None:
    """torch.save to a file object, as every checkpoint file is written: without the CRC-32 of
    each record in the archive, two thirds of serialization's CPU time. txl.json records each
    whole file's CRC-32, checked before anything loads it, and torch.load does not read the
    records' (zip tools do: `unzip -t` reports them as bad)."""
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(value, file, _use_new_zipfile_serialization=zipfile)
    finally:
        torch.serialization.set_crc32_options(before)
