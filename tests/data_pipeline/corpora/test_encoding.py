"""Tokenization details of the corpora package against their plain definitions."""

from __future__ import annotations

from data_pipeline.corpora.boundaries import TITLE_BOUNDARY
from data_pipeline.corpora.encoding import encode_wikitext, local_tokens


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
