"""WordCounts: occurrences per word, in order of first appearance, through its merges."""

from __future__ import annotations

from collections import Counter

import numpy as np

from data_pipeline.prepare.word_counts import WordCounts

PIECES = ["b a c a", "d b b", "a e", "c c f b"]


def added(counts: WordCounts) -> WordCounts:
    """`counts` given each piece's distinct words (first-appearance order) and their counts."""
    for piece in PIECES:
        piece_counts = Counter(piece.split())  # a Counter keeps insertion order
        counts.add(" ".join(piece_counts).encode(), np.array(list(piece_counts.values())))
    return counts


def test_counts_over_pieces_sum_each_word_in_first_appearance_order():
    expected = Counter(" ".join(PIECES).split())
    for merge_words in (1 << 22, 3, 1):  # one merge at the end, merges between pieces, each add
        counts = WordCounts()
        counts.MERGE_WORDS = merge_words
        words = added(counts).words()
        assert words == list(expected)
        assert counts.counts.tolist() == list(expected.values())


def test_no_words_are_none():
    counts = WordCounts()
    assert counts.words() == [] and counts.counts.tolist() == []
