"""Document boundaries: the first start at or after any byte, found from a small window."""

from __future__ import annotations

import logging

import fsspec
import pytest

from data_pipeline.corpora.boundaries import (
    boundary_at_or_after,
    document_starts,
    end_of_last_whole_document,
    next_article,
    next_block,
    next_line,
    next_line_start,
)

ARTICLES = b" \n = Abc = \n \n x y\n \n = Bcd = \n \n z\n \n = Not a title\n \n = Cde = \n \n w\n"
LINES = b"one\ntwo words\n\nthree\n"
BLOCKS = b"a b\nc\n\nd\n\ne\n\n\nf\n"
# Empty lines ended by LF, CRLF or both, as a file whose lines were joined from several holds
# them; a line of spaces is no cut (a blank line, but a cut must show in a few bytes).
MIXED_BLOCKS = b"a b\nc\n\nd\r\n\r\ne\n\r\nf\r\n\n\r\n\r\ng\r\n  \r\nh\r\n"
# Each file's document starts after its first, written out: a line start past the last newline
# (the file's end), a block after each of two empty lines in a row
STARTS = {
    "article": (
        next_article,
        ARTICLES,
        [ARTICLES.index(b" \n = Bcd"), ARTICLES.index(b" \n = Cde")],
    ),
    "line": (next_line, LINES, [4, 14, 15, 21]),
    "block": (next_block, BLOCKS, [7, 10, 13, 14]),
    "crlf-block": (next_block, MIXED_BLOCKS, [7, 12, 16, 20, 22, 24]),
}
LOCAL = fsspec.filesystem("file")


def written(tmp_path, data: bytes) -> str:
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", STARTS)
def test_every_byte_moves_to_the_first_document_start_at_or_after_it(case, tmp_path):
    finder, data, starts = STARTS[case]
    assert list(document_starts(data, 1, finder)) == starts
    path, end = written(tmp_path, data), len(data)
    found = [boundary_at_or_after(LOCAL, path, path, finder, pos, end) for pos in range(end + 1)]
    expected = [0] + [
        min([s for s in starts if s >= pos], default=end) for pos in range(1, end + 1)
    ]
    assert found == expected


def test_a_document_longer_than_the_window_is_read_on_to_its_end(tmp_path):
    data = b"a\n" + b"x" * 300_000 + b"\nb\n"  # the 64 KiB window grows twice
    path = written(tmp_path, data)
    assert boundary_at_or_after(LOCAL, path, path, next_line, 3, len(data)) == 300_003
    assert next_line_start(LOCAL, path, path, 3, len(data)) == 300_003
    assert boundary_at_or_after(LOCAL, path, path, next_line, 300_004, len(data)) == len(data)


def test_a_file_is_one_document_without_a_finder(tmp_path):
    path = written(tmp_path, LINES)
    found = [boundary_at_or_after(LOCAL, path, path, None, pos, 21) for pos in (-1, 0, 1, 20)]
    assert found == [0, 0, 21, 21]


def test_a_line_start_is_its_own_next_line_start(tmp_path):
    path = written(tmp_path, LINES)
    found = [next_line_start(LOCAL, path, path, pos, 21) for pos in (0, 4, 5, 14, 15, 16, 30)]
    assert found == [0, 4, 14, 14, 15, 21, 21]


def test_a_cut_last_document_is_dropped_with_a_warning(tmp_path, caplog):
    path = written(tmp_path, ARTICLES)
    assert end_of_last_whole_document(LOCAL, path, path, next_article) == len(ARTICLES)
    cut = ARTICLES[:-1] + b" and more"
    path = written(tmp_path, cut)
    with caplog.at_level(logging.WARNING):
        end = end_of_last_whole_document(LOCAL, path, path, next_article)
    assert end == STARTS["article"][2][-1] and "does not end with a newline" in caplog.text
    path = written(tmp_path, b"one document, cut")
    assert end_of_last_whole_document(LOCAL, path, path, next_article) == 0


def test_an_empty_crlf_line_ending_at_a_cut_is_a_block_start():
    data = b"a b\nc\n\nd\r\n\r\ne\n"  # "\n\r\n" ends at 12: three bytes before it say so
    assert [next_block(data, pos) for pos in (8, 11, 12, 13)] == [12, 12, 12, None]
