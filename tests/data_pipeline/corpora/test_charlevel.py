"""enwik8 and text8 cut and tokenized: ids by first appearance, and the refusals of a bad file."""

from __future__ import annotations

import io

import numpy as np
import pytest

from data_pipeline.corpora.charlevel import (
    by_first_appearance,
    copy_bytes,
    corpus_file,
    enwik8_tokens,
    text8_tokens,
)
from data_pipeline.shards.errors import CorpusFormatError


def test_a_byte_first_seen_past_the_first_blocks_still_gets_its_place():
    # d and c past the first 64 Ki block, in the reverse of their byte order
    values = np.frombuffer(b"ba" * 70_000 + b"d" + b"a" * 200_000 + b"c", np.uint8)
    names, ids = by_first_appearance(values, chr)
    assert names == ["b", "a", "d", "c"]
    assert ids[[0, 1, 140_000, -1]].tolist() == [0, 1, 2, 3]


def test_enwik8_drops_newline_bytes_and_names_bytes_by_value():
    names, ids = enwik8_tokens("h\u00e9\n\nh".encode(), "enwik8")
    assert names == ["104", "195", "169"] and ids.tolist() == [0, 1, 2, 0]


def test_text8_strips_its_ends_and_writes_space_as_an_underscore():
    names, ids = text8_tokens(b" ab ba \n", "text8")
    assert names == ["a", "b", "_"] and ids.tolist() == [0, 1, 2, 1, 0]


def test_a_corpus_that_ends_early_is_named(tmp_path):
    with pytest.raises(CorpusFormatError, match="valid.txt: the corpus ended early"):
        copy_bytes(io.BytesIO(b"short"), tmp_path / "valid.txt", 10)


def test_a_tar_is_refused_saying_what_the_corpus_comes_as(tmp_path):
    (tmp_path / "enwik8.tar.gz").write_bytes(b"")
    refusal = "enwik8 comes as enwik8.zip or the unpacked"
    with (
        pytest.raises(CorpusFormatError, match=refusal),
        corpus_file(tmp_path / "enwik8.tar.gz", "enwik8"),
    ):
        pass
