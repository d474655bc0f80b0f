"""Tokenization details of the corpora package against their plain definitions."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline.corpora.boundaries import TITLE_BOUNDARY
from data_pipeline.corpora.datasets import dataset
from data_pipeline.corpora.encoding import encode_text_blocks, encode_wikitext, local_tokens
from data_pipeline.prepare.units import split_units

# Six text blocks, as each line end and blank line below must leave them.
BLOCKS = [
    "a b <eos> c <eos>",
    "d <eos>",
    "e f g <eos> h <eos> i <eos>",
    "j <eos>",
    "k <eos>",
    "m <eos>",
]
# The blocks with CRLF line ends, and with LF and CRLF mixed, blank lines of spaces among them.
BLOCK_TEXTS = {
    "crlf": b"a b\r\nc\r\n\r\nd\r\n\r\n\r\ne f g\r\nh\r\ni\r\n \r\nj\r\n\r\nk\r\n\r\nm\r\n",
    "mixed": b"a b\nc\r\n\nd\r\n\r\n\ne f g\r\nh\ni\n\r\n \r\nj\n\nk\r\n\r\nm\n",
}


def test_wikitext_articles_start_at_every_title_boundary(shared_data):
    back_to_back = b"x\n \n = Abc = \n \n = Bcd = \n \n y\n \n = Cde = \n \n"
    for data in (back_to_back, (shared_data / "wikitext-103" / "wiki.valid.tokens").read_bytes()):
        chunk = encode_wikitext(data, local_tokens)
        starts = [m.start() for m in TITLE_BOUNDARY.finditer(data, 1)]
        lines_before = [data.count(b"\n", 0, s) for s in starts]
        # Each line is its words and <eos>: documents are the token runs between those lines.
        line_tokens = [len(line.split()) + 1 for line in data.split(b"\n")[:-1]]
        bounds = [0, *lines_before, len(line_tokens)]
        expected = [sum(line_tokens[a:b]) for a, b in zip(bounds, bounds[1:])]
        assert chunk.doc_lengths.tolist() == expected
    assert len(encode_wikitext(back_to_back, local_tokens).doc_lengths) == 4


def documents_in_pieces(path: str, unit_bytes: int, piece_bytes: int) -> list[str]:
    """The documents txl-prepare's workers encode from a text file cut into these units and
    pieces (units.split_units, Unit.pieces, Documents.encode_range), as words."""
    documents, found = dataset("text").documents, []
    for unit in split_units("train", [path], documents, unit_bytes, {}):
        for piece in unit.pieces(piece_bytes):
            chunk = documents.encode_range(*piece)
            words = [chunk.words[i].decode() for i in chunk.ids]
            bounds = np.cumsum([0, *chunk.doc_lengths]).tolist()
            found += [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
    return found


@pytest.mark.parametrize("line_ends", BLOCK_TEXTS)
def test_text_blocks_are_the_same_however_the_file_is_cut(tmp_path, line_ends):
    data = BLOCK_TEXTS[line_ends]
    path = tmp_path / "train.txt"
    path.write_bytes(data)
    for size in range(1, len(data) + 1):  # every cut of the file falls somewhere
        assert documents_in_pieces(str(path), len(data), size) == BLOCKS
        assert documents_in_pieces(str(path), size, len(data)) == BLOCKS


def test_crlf_blank_lines_separate_text_blocks_as_lf_ones_do():
    for data in BLOCK_TEXTS.values():  # as they are, not read with universal newlines first
        chunk = encode_text_blocks(data, local_tokens)
        assert chunk.doc_lengths.tolist() == [len(block.split()) for block in BLOCKS]
