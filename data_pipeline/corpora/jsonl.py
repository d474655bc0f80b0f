"""JSONL record files: one JSON object per line, its ``--text-field`` the document.

A plain file is cut into pieces at line starts like any text file; a compressed one cannot be
entered in the middle, so it is one piece, read as a stream (keep such files to a few hundred MB
each: a piece's ids are held until its unit is written). A line over limits.RECORD_BYTES is
never held: its bytes are dropped as they stream past. What a record may hold is records.py's.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import fsspec

from data_pipeline.corpora.boundaries import next_line_start, read_range
from data_pipeline.corpora.records import Place, RecordDocuments
from data_pipeline.limits import (
    DECOMPRESSED_BYTES,
    OVERSIZED,
    RECORD_BYTES,
    STREAM_RECORDS,
    Oversized,
)
from data_pipeline.shards.errors import CorpusFormatError, reading

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
# Bytes read at a time: a line longer than the record cap is dropped as it streams past.
READ_BYTES = 1 << 22


@dataclass(frozen=True)
class JsonLines(RecordDocuments):
    """JSONL files: plain ones in pieces cut at line starts, compressed ones whole as a stream
    (by the piece at their start)."""

    def batches(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator:
        """A plain file's lines that start in [start, stop), in one batch; a compressed file's
        lines (all of them, in the piece at its start) in batches of STREAM_RECORDS."""
        if url.endswith(".jsonl"):
            yield list(enumerate(self.plain_lines(url, start, stop, end, options), 1))
        elif start == 0:
            with (
                reading("corpus file", url),
                fsspec.open(url, "rb", compression="infer", **options) as f,
            ):
                blocks = capped(iter(functools.partial(f.read, READ_BYTES), b""), url)
                lines = enumerate(bounded_lines(blocks, RECORD_BYTES.value()), 1)
                while batch := list(itertools.islice(lines, STREAM_RECORDS)):
                    yield batch

    def plain_lines(
        self, url: str, start: int, stop: int, end: int, options: dict
    ) -> Iterator[bytes | Oversized]:
        """The lines of a plain file that start in [start, stop)."""
        fs, path = fsspec.core.url_to_fs(url, **options)
        first = next_line_start(fs, path, url, start, end)
        last = next_line_start(fs, path, url, stop, end)
        blocks = (
            read_range(fs, path, a, min(a + READ_BYTES, last), url)
            for a in range(first, last, READ_BYTES)
        )
        return bounded_lines(blocks, RECORD_BYTES.value())

    def place(self, url: str, start: int, end: int, options: dict) -> Place:
        """A plain file's piece is numbered from its first line, counted when an error asks."""
        if not url.endswith(".jsonl"):
            return super().place(url, start, end, options)

        @functools.cache
        def first() -> int:
            fs, path = fsspec.core.url_to_fs(url, **options)
            return lines_before(fs, path, url, next_line_start(fs, path, url, start, end)) + 1

        return Place(url, self.numbered, first, at_start=start == 0)


def lines_before(fs, path: str, url: str, offset: int) -> int:
    """Newlines in the first ``offset`` bytes of a file (read in bounded blocks)."""
    block = 1 << 24
    return sum(
        read_range(fs, path, a, min(a + block, offset), url).count(b"\n")
        for a in range(0, offset, block)
    )


def bounded_lines(blocks: Iterable[bytes], limit: int) -> Iterator[bytes | Oversized]:
    """The lines of a stream of byte blocks (split at newlines only), each line over ``limit``
    bytes as OVERSIZED: its bytes are dropped as they come, never held whole."""
    head: list[bytes] = []  # the line so far, while within the limit
    size = 0  # its bytes, counted on past the limit
    for block in blocks:
        *ended, rest = block.split(b"\n")
        if ended:
            size += len(ended[0])
            yield OVERSIZED if size > limit else b"".join([*head, ended[0]])
            yield from (line if len(line) <= limit else OVERSIZED for line in ended[1:])
            head, size = [], 0
        size += len(rest)
        if size <= limit:
            head.append(rest)
        else:
            head = []
    if size:
        yield OVERSIZED if size > limit else b"".join(head)


def capped(blocks: Iterable[bytes], url: str) -> Iterator[bytes]:
    """The blocks of a decompressed file, refused once past limits.DECOMPRESSED_BYTES."""
    total, limit = 0, DECOMPRESSED_BYTES.value()
    for block in blocks:
        total += len(block)
        if total > limit:
            raise CorpusFormatError(
                f"{url} decompresses to more than {DECOMPRESSED_BYTES.named()} bytes: split it "
                "into smaller files (or raise the cap for a file you trust)"
            )
        yield block
