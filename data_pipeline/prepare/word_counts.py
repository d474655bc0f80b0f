"""``WordCounts``: how often each word occurs, words in order of first appearance, merged from
the pieces' and units' counts in bounded memory (what a built vocabulary is made from)."""

from __future__ import annotations

import numpy as np

from data_pipeline.wordids import split_ids


class WordCounts:
    """Occurrences per word, words in order of first appearance (memory: one entry per type
    plus a bounded buffer). Words travel as space-separated UTF-8 text; merges are vectorized
    (wordids.split_ids), each over everything so far, so they wait for MERGE_WORDS new words."""

    MERGE_WORDS = 1 << 22

    def __init__(self):
        self.text, self.counts = b"", np.zeros(0, np.int64)  # merged: distinct words
        self.pending: list[tuple[bytes, np.ndarray]] = []
        self.pending_words = 0

    def add(self, text: bytes, counts: np.ndarray) -> None:
        """Add the counts of the distinct words in ``text`` (space-separated)."""
        self.pending.append((text, counts))
        self.pending_words += len(counts)
        if self.pending_words >= self.MERGE_WORDS:
            self.merge()

    def merge(self) -> None:
        if not self.pending:
            return
        words, ids = split_ids(b" ".join([self.text, *(t for t, _ in self.pending)]))
        weights = np.concatenate([self.counts, *(c for _, c in self.pending)])
        # float64 sums are exact below 2**53 occurrences
        self.counts = np.bincount(ids, weights, len(words)).astype(np.int64)
        self.text, self.pending, self.pending_words = b" ".join(words), [], 0

    def words(self) -> list[str]:
        """All words seen, in first-appearance order (counts: self.counts after this call)."""
        self.merge()
        return self.text.decode("utf-8").split(" ") if self.text else []
