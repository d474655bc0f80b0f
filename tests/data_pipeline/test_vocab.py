"""Vocab: the reference ordering, its file format, its identity hash and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline.shards.errors import VocabMismatchError
from data_pipeline.vocab import EOS, UNK_LM1B, UNK_WIKI, Vocab, vocab_entries


def test_build_puts_specials_first_then_descending_counts_ties_by_first_appearance():
    words = ["the", "cat", "<eos>", "sat", "mat", "rare"]
    vocab = Vocab.build(words, np.array([5, 2, 9, 5, 2, 1]), [EOS, UNK_WIKI], min_count=2)
    assert vocab.tokens == [EOS, UNK_WIKI, "the", "sat", "cat", "mat"]  # "rare" below min_count
    assert vocab.counts == [9, 0, 5, 5, 2, 2]


def test_entries_part_at_ascii_whitespace_only():
    text = "a\t3\nno\xa0break 2\n\n  spaced   7  \r\nbare\n"
    assert vocab_entries(text) == [["a", "3"], ["no\xa0break", "2"], ["spaced", "7"], ["bare"]]


def test_a_saved_vocabulary_loads_back_and_its_hash_ignores_counts(tmp_path):
    vocab = Vocab(["<eos>", "a", "no\xa0break"], [0, 7, 2])
    vocab.save(str(tmp_path / "vocab.txt"))
    loaded = Vocab.load(str(tmp_path / "vocab.txt"))
    assert (loaded.tokens, loaded.counts) == (vocab.tokens, vocab.counts)
    assert Vocab(vocab.tokens).sha256 == vocab.sha256 != Vocab(vocab.tokens[::-1]).sha256


def test_a_count_that_is_no_number_names_the_entry(tmp_path):
    (tmp_path / "vocab.txt").write_text("a 3\nb x3\n")
    with pytest.raises(VocabMismatchError, match=r"vocab.txt: entry 'b' has count 'x3'"):
        Vocab.load(str(tmp_path / "vocab.txt"))


def test_a_token_listed_twice_is_refused():
    with pytest.raises(VocabMismatchError, match="lists a token twice"):
        Vocab(["a", "b", "a"])


def test_unknown_words_become_the_unknown_token_and_are_counted():
    vocab = Vocab([EOS, UNK_LM1B, "a", "b"])
    assert vocab.unk == UNK_LM1B
    assert vocab.encode(["a", "zz", "b"]).tolist() == [2, 1, 3]
    # the unknown token itself is a known word; "zz" is not
    ids, unknown = vocab.encode_local([UNK_LM1B, "zz", "a"], np.array([0, 1, 1, 2]))
    assert (ids.tolist(), unknown) == ([1, 1, 1, 2], 2)
    assert vocab.decode([2, 3, 0]) == ["a", "b", EOS]


def test_without_an_unknown_token_missing_words_are_named():
    with pytest.raises(VocabMismatchError, match=r"words \['zz'\] are not in the vocabulary"):
        Vocab([EOS, "a"]).encode(["a", "zz"])
