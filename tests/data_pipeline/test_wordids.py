"""The vectorized word splitting and lookups equal their dict-based reference definitions."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline import wordids
from data_pipeline.corpora.encoding import EXOTIC_SPACE
from data_pipeline.shards.errors import VocabMismatchError
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


def test_hash_collisions_stay_exact(monkeypatch):
    # Every word hashes alike: split_ids falls back to the dict, the table walks one long run.
    monkeypatch.setattr(wordids, "mix", lambda k0, k1: np.zeros_like(k0))
    assert_same(EDGES)
    assert WordTable({"a": 0, "b": 1}).get(["b", "c", "a"] * 2000, -1).tolist() == [1, -1, 0] * 2000
    table = WordTable({"bb": 0, "a": 1, "ccc": 2})
    assert table.usable()
    assert table.text_ids(b"a x bb ccc a")[0].tolist() == [1, -1, 0, 2, 1]


def test_word_table_equals_dict_get(shared_data):
    vocab = Vocab(
        list(dict.fromkeys((shared_data / "wikitext-2" / "valid.txt").read_text().split()))
    )
    words = (shared_data / "wikitext-2" / "test.txt").read_text().split()
    words += ["x" * 30, "a\x00", "", "日本語", vocab.tokens[-1] + "x"]
    expected = [vocab.index.get(w, -7) for w in words]
    assert vocab.table.get(words, -7).tolist() == expected
    assert vocab.table.usable()  # the table, not the dict, answered
    assert vocab.table.get(words[:10], -7).tolist() == expected[:10]


def assert_text_ids_equal_dict_get(vocab: Vocab, text: bytes) -> None:
    words = text.split()
    assert vocab.table.usable()
    ids, marks = vocab.table.text_ids(text)
    assert ids.dtype == np.int32
    assert ids.tolist() == [vocab.index.get(w.decode(), -1) for w in words]
    assert marks.tolist() == [i for i, w in enumerate(words) if w == b"\0"]


def test_text_ids_equal_dict_get_of_split_words(shared_data):
    # Words of every length around the 8- and 16-byte key halves, in the table or not.
    words = [w for w in dict.fromkeys(EDGES.decode().split()) if "\0" not in w]
    vocab = Vocab([*words, "日本語", "x" * 20] + [f"w{i}" for i in range(5000)])
    assert_text_ids_equal_dict_get(vocab, EDGES + " 日本語 日本 w4999 w5000 ".encode() + b"x" * 20)
    assert_text_ids_equal_dict_get(vocab, b"")
    valid = (shared_data / "wikitext-2" / "valid.txt").read_text()
    vocab = Vocab(list(dict.fromkeys(valid.split())))
    for path in sorted(shared_data.glob("*/*")):
        if path.name != "SOURCES.md":
            assert_text_ids_equal_dict_get(vocab, path.read_bytes().replace(b"\n", b" \x00 "))


def test_encode_text_equals_encode_local():
    vocab = Vocab(["<eos>", "<unk>", "a", "bb"])
    text = b"a zz \0 bb <unk> a \0 qqqqqqqqqqqqqqqqqqqq \0"
    words, local = split_ids(text.replace(b"\0", b"<eos>"))
    expected, oov = vocab.encode_local([w.decode() for w in words], local)
    ids, marks, oov_tokens = vocab.encode_text(text, "<eos>")
    assert ids.tolist() == expected.tolist() and marks.tolist() == [2, 6, 8]
    assert oov_tokens == oov == 2  # zz and the long word; the literal <unk> is no unknown word


def test_encode_text_without_an_unknown_token_names_the_missing_words():
    vocab = Vocab(["<eos>", "a"])
    with pytest.raises(VocabMismatchError, match=r"\['zz', 'yy'\] are not in the vocabulary"):
        vocab.encode_text(b"a zz \0 yy", "<eos>")
    with pytest.raises(VocabMismatchError, match=r"\['<S>'\] are not in the vocabulary"):
        vocab.encode_text(b"\0 a \0", "<S>")


def test_exotic_space_check_equals_the_regex():
    seconds, thirds = (
        (0x80, 0x81, 0x85, 0x9A, 0xA0, 0x41),
        (0x80, 0x8A, 0x8B, 0x9F, 0xA8, 0xA9, 0xAF, 0xB0),
    )
    cases = {bytes([lead]) for lead in range(256)}  # each case once (a set): 14,080, not 36,864
    cases |= {bytes([lead, second]) for lead in range(256) for second in seconds}
    cases |= {bytes([65, lead, s, t]) for lead in range(256) for s in seconds for t in thirds}
    differing = [
        data for data in cases if has_exotic_space(data) != bool(EXOTIC_SPACE.search(data))
    ]
    assert not differing, sorted(differing)[:20]
