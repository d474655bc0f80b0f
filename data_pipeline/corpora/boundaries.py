"""Document boundaries: where in a corpus file documents start, found from a small window.

A file is cut into nominal ranges of ``piece_bytes``; each worker moves both ends of its range to
the next document boundary itself (reading only a small window), so the main process never reads
text and neighbouring ranges agree on their common boundary. A dataset's documents name their
boundary finder (encoding.Documents); one without a finder is one document per file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

from data_pipeline.redact import redact_text
from data_pipeline.shards.errors import reading

log = logging.getLogger(__name__)

# finder(data, pos): the first document start at or after ``pos`` in ``data``, None if none.
Finder = Callable[[bytes, int], int | None]

TITLE_BOUNDARY = re.compile(rb"^ \r?\n = [^=\r\n][^\r\n]*[^=\r\n] = \r?\n(?= \r?\n)", re.M)
# A text block ends at a blank line: one holding nothing but spaces, tabs, \v or \f, ended by LF
# or CRLF (mixed line ends alike); a run of them is one break (encoding.BLANK_RUN).
BLANK_LINE = rb"[ \t\x0b\x0c]*\r?\n"
# Pieces are cut only after an empty line (LF or CRLF), a break that a fixed few bytes show: a
# line of spaces may be any length. Every cut is a break, so documents never depend on the cuts.
EMPTY_LINE = re.compile(rb"\n\r?\n")
CONTEXT = 3  # bytes read before a search position: "^", or a "\n\r\n" ending at it, seen whole


def next_article(data: bytes, pos: int) -> int | None:
    """First WikiText article start at or after ``pos``: the ``" "`` line directly before a
    `` = Title = `` line that has a ``" "`` line after it too."""
    m = TITLE_BOUNDARY.search(data, pos)
    return m.start() if m else None


def next_line(data: bytes, pos: int) -> int | None:
    """First line start at or after ``pos`` (an lm1b sentence boundary)."""
    if data[pos - 1 : pos] == b"\n":
        return pos
    i = data.find(b"\n", pos)
    return i + 1 if i >= 0 else None


def next_block(data: bytes, pos: int) -> int | None:
    """First position after an empty line (LF or CRLF) at or after ``pos`` (a text block
    boundary)."""
    m = EMPTY_LINE.search(data, max(pos - CONTEXT, 0))
    if m and m.end() < pos:  # a "\n\n" ending before pos: one a byte on may end at pos
        m = EMPTY_LINE.search(data, m.start() + 1)
    return m.end() if m else None


def read_range(fs, path: str, start: int, stop: int, url: str) -> bytes:
    """Bytes [start, stop) of a corpus file, with read failures as DataErrors."""
    with reading("corpus file", url):
        return fs.cat_file(path, start, stop)


def boundary_at_or_after(
    fs, path: str, url: str, next_start: Finder | None, pos: int, end: int
) -> int:
    """First document boundary at or after byte ``pos`` of a file (``end`` if none); without a
    finder the file is one document."""
    if next_start is None:
        return 0 if pos <= 0 else end
    if pos <= 0 or pos >= end:
        return min(max(pos, 0), end)
    window = 1 << 16
    while True:
        lo, hi = max(pos - CONTEXT, 0), min(pos + window, end)
        found = next_start(read_range(fs, path, lo, hi, url), pos - lo)
        if found is not None:
            return lo + found
        if hi == end:
            return end
        window *= 4


def next_line_start(fs, path: str, url: str, pos: int, end: int) -> int:
    """First line start at or after byte ``pos`` of a file (``end`` if none), found by reading
    on in blocks of a fixed size: a line of any length costs no more memory than a block."""
    if pos <= 0 or pos >= end:
        return min(max(pos, 0), end)
    at, block = pos - 1, 1 << 16  # a newline just before pos makes pos a line start
    while at < end:
        found = read_range(fs, path, at, min(at + block, end), url).find(b"\n")
        if found >= 0:
            return at + found + 1
        at += block
    return end


def end_of_last_whole_document(fs, path: str, url: str, next_start: Finder) -> int:
    """File size, less the cut last document of a file that lacks a final newline."""
    size = fs.size(path)
    if size == 0 or read_range(fs, path, size - 1, size, url) == b"\n":
        return size
    window = 1 << 16
    while True:
        lo = max(size - window, 0)
        data = read_range(fs, path, lo, size, url)
        starts = list(document_starts(data, 0 if lo == 0 else CONTEXT, next_start))
        if starts or lo == 0:
            end = lo + starts[-1] if starts else 0
            shown = redact_text(url)
            log.warning("%s does not end with a newline: dropped its last, cut article", shown)
            return end
        window *= 4


def document_starts(data: bytes, pos: int, next_start: Finder) -> Iterator[int]:
    """Every document start in ``data`` at or after ``pos``."""
    while (found := next_start(data, pos)) is not None:
        yield found
        pos = found + 1
