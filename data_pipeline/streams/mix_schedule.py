"""Which corpus a mix's row reads next, and where each row starts, so that the token shares hold
their weights from the first step.

Next corpus. At every document boundary a row takes its next document from the corpus furthest
behind its share of the row's tokens: the largest ``weight_c * total - counts_c``. The choice is
deterministic and adapts to the real lengths of the documents read, so a row's share of corpus c
strays from its weight by about one document (of any corpus), not by a random walk of many.

Start. A row that started every corpus at zero would begin with the same corpus in every row
(the first is furthest behind by a tie) and read a whole first document: the run's share would
be far off for the first documents' worth of tokens. Instead each row starts as if it had been
running for a while: the schedule is walked with documents of the corpora's mean lengths, and
row g of G starts at time ``warm_up + cycle * frac(u + g / G)`` of that walk (``u`` from the
seed; ``cycle``, the longest ``mean_document_tokens / weight``, is how often the corpus that
recurs most rarely comes back): in the corpus being read there. A seed's rows spread evenly over
one cycle, so their first corpora take every corpus in proportion to its token share. The row
then reads its first corpus from a seeded offset in the first few mean documents of its share:
it starts mid-document, in a document drawn by length as a random token's would be, and the
schedule counts that document from its start, on the walk's counts where its document began, as
a row that had been running would. The expected share of every corpus is then its weight at
every step, as in a stationary process (measured by bench/mix_shares.py, docs/own-corpora.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MASK64 = (1 << 64) - 1
START_WINDOW_DOCUMENTS = 8
"""A row's first document starts at a token drawn from this many mean documents of its share
(after the share's first end of a document: the share may begin inside one)."""
SETTLING_DOCUMENTS = 3
"""Mean documents of the corpus with the longest ones a row reads before the run's shares are
close to the weights (docs/own-corpora.md: how close)."""
WARM_UP_CYCLES = 4
"""Cycles of the mean-length walk before the first row's start (away from the walk's start,
where every corpus is equally behind)."""


def splitmix64(x: int) -> int:
    """One splitmix64 output for state ``x``: a well-mixed 64-bit hash of a 64-bit integer."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uniform(seed: int, row: int, salt: int) -> float:
    """A number in [0, 1) that depends on (seed, row, salt) only."""
    h = splitmix64(splitmix64(splitmix64(seed & MASK64) ^ (row & MASK64)) ^ salt)
    return (h >> 11) / float(1 << 53)


@dataclass(frozen=True)
class RowStart:
    """Where a row starts: its first corpus, the schedule's counts there, and where in the first
    few documents of its share of that corpus."""

    corpus: int
    """The corpus of the row's first document."""
    counts: list[int]
    """Per corpus, the tokens the schedule counts as read where the first document began (from
    the mean-length walk)."""
    fraction: float
    """Where the row's first token lies in the first corpus's start window, in [0, 1)."""


class MixSchedule:
    """The corpora's weights (normalized) and mean document lengths, and the choices made from
    them."""

    def __init__(self, weights: list[float], mean_tokens: list[float]):
        total = sum(weights)
        self.weights = np.array([w / total for w in weights], np.float64)
        self.mean_tokens = np.array(mean_tokens, np.float64)

    def next_corpus(self, counts: list[int]) -> int:
        """The corpus furthest behind its share of ``counts``' total (the first of ties)."""
        behind = self.weights * sum(counts) - np.array(counts, np.float64)
        return int(np.argmax(behind))

    def settling_tokens(self) -> tuple[int, int]:
        """(tokens per row, corpus): how many tokens each row reads before the run's shares
        are close to the weights, set by the corpus with the longest documents."""
        longest = int(np.argmax(self.mean_tokens))
        return round(SETTLING_DOCUMENTS * self.mean_tokens[longest]), longest

    def starts(self, seed: int, global_rows: int) -> list[RowStart]:
        """Every global row's start."""
        cycle = float(np.max(self.mean_tokens / self.weights))
        u = uniform(seed, -1, 0)
        times = [cycle * (WARM_UP_CYCLES + (u + g / global_rows) % 1.0) for g in range(global_rows)]
        walked = self.walk(times)
        return [RowStart(c, counts, uniform(seed, g, 1)) for g, (c, counts) in enumerate(walked)]

    def start_window(self, corpus: int) -> int:
        """Tokens of a share a row's first token is drawn from (after its first end)."""
        return round(START_WINDOW_DOCUMENTS * self.mean_tokens[corpus])

    def walk(self, times: list[float]) -> list[tuple[int, list[int]]]:
        """(corpus, counts) of the document read at each of ``times``, in the schedule walked
        with documents of the mean lengths from zero counts; the counts where it began."""
        order = sorted(range(len(times)), key=times.__getitem__)
        at: list[tuple[int, list[int]]] = [(0, [])] * len(times)
        counts = np.zeros(len(self.weights), np.float64)
        clock = 0.0
        for i in order:
            while True:
                corpus = int(np.argmax(self.weights * clock - counts))
                length = self.mean_tokens[corpus]
                if clock + length > times[i]:
                    break
                counts[corpus] += length
                clock += length
            at[i] = (corpus, [round(c) for c in counts])
        return at

    def corpus_at(self, seed: int, row: int, document: int) -> int:
        """The corpus of a row's document in the schedule of stream states of version 1 (drawn
        by hash, with probability proportional to weight / mean document tokens): the document
        such a state's rows stand in when it is resumed."""
        per_document = self.weights / self.mean_tokens
        thresholds = np.cumsum(per_document) / per_document.sum()
        u = uniform(seed, row, document)
        return min(int(np.searchsorted(thresholds, u, side="right")), len(self.weights) - 1)
