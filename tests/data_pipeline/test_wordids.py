"""The vectorized word splitting and lookups equal their dict-based reference definitions."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline import wordids
from data_pipeline.corpora import EXOTIC_SPACE
from data_pipeline.vocab import Vocab
from data_pipeline.wordids import WordTable, first_appearance_ids, has_exotic_space, split_ids

EDGES = (
    b"  a\tbb \x00 ccc\r\n\x0b\x0cdddddddd eeeeeeeee dddddddd ffffffffffffffff "
    b"fffffffffffffffff fffffffffffffffffff fffffffffffffffff a \xe2\x80\x94 \xc3\xa9t\xc3\xa9 "
    b"aaaaaaaa aaaaaaaab aaaaaaaa\x00 \x00 bb"
)


def assert_same(text: bytes) -> None:
    words, ids = split_ids(text)
    expected_words, expected_ids = first_appearance_ids(text.split())
    assert words == expected_words
    assert ids.dtype == np.int32 and ids.tolist() == expected_ids.tolist()


@pytest.mark.parametrize("text", [EDGES, b"", b" \n\t ", b"x", b"x" * 40])
def test_split_ids_equals_split_and_dict(text):
    assert_same(text)


def test_split_ids_on_real_corpora(shared_data):
    for path in sorted(shared_data.glob("*/*")):
        if path.name != "SOURCES.md":
            assert_same(path.read_bytes().replace(b"\n", b" \x00 "))


def test_a_hash_collision_falls_back_to_the_dict(monkeypatch):
    # Every word hashes alike: the exact keys disagree inside a group, so the dict decides.
    monkeypatch.setattr(wordids, "mix", lambda k0, k1: np.zeros_like(k0))
    assert_same(EDGES)
    assert WordTable({"a": 0, "b": 1}).get(["b", "c", "a"] * 2000, -1).tolist() == [1, -1, 0] * 2000


def test_word_table_equals_dict_get(shared_data):
    vocab = Vocab(
        list(dict.fromkeys((shared_data / "wikitext-2" / "valid.txt").read_text().split()))
    )
    words = (shared_data / "wikitext-2" / "test.txt").read_text().split()
    words += ["x" * 30, "a\x00", "", "日本語", vocab.tokens[-1] + "x"]
    expected = [vocab.index.get(w, -7) for w in words]
    assert vocab.table.get(words, -7).tolist() == expected
    assert vocab.table.hashes is not None  # the table, not the dict, answered
    assert vocab.table.get(words[:10], -7).tolist() == expected[:10]


def test_exotic_space_check_equals_the_regex():
    for lead in range(256):
        for second in (0x80, 0x81, 0x85, 0x9A, 0xA0, 0x41):
            for third in (0x80, 0x8A, 0x8B, 0x9F, 0xA8, 0xA9, 0xAF, 0xB0):
                for data in (
                    bytes([65, lead, second, third]),
                    bytes([lead]),
                    bytes([lead, second]),
                ):
                    assert has_exotic_space(data) == bool(EXOTIC_SPACE.search(data)), data
