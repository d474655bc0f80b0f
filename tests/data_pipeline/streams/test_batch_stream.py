"""The contract both streams keep: the vocabulary of the data checked against the model's."""

import pytest

from data_pipeline import TokenStreams, Vocab, VocabMismatchError


def test_vocab_size_is_checked(wt103, wt103_valid):
    n_token = len(Vocab.load(str(wt103 / "vocab.txt")))
    stream = TokenStreams(wt103_valid, 2, 50, expected_vocab_size=n_token)
    assert stream.vocab_size == n_token
    with pytest.raises(
        VocabMismatchError,
        match=rf"valid/manifest.json.*vocabulary of {n_token} tokens, the model has 267735",
    ):
        TokenStreams(wt103_valid, 2, 50, expected_vocab_size=267_735)
    with pytest.raises(VocabMismatchError, match=f"the model has {n_token - 1};"):
        stream.check_vocab(n_token - 1)
