"""Which corpus a mix's row reads next, and where each row starts, so that the token shares hold
their weights from the first step.

Next corpus. At every document boundary a row takes its next document from the corpus furthest
behind its share of the row's tokens: the largest ``weight_c * total - counts_c``. The choice is
deterministic and adapts to the real lengths of the documents read, so a row's share of corpus c
strays from its weight by about one document (of any corpus), not by a random walk of many.

Start. A row that started every corpus at zero would begin with the same corpus in every row
(the first is furthest behind by a tie) and read a whole first document: the run's share would
be far off for the first documents' worth of tokens. Instead each row starts in the state of a
row that has been running for a while. That state is taken from a walk of the schedule with
documents of the corpora's real lengths (drawn from each corpus's sampled lengths, past a
warm-up of a few cycles): row g of G starts in corpus c where ``frac(u + g / G)`` falls in c's
interval of the cumulative weights (``u`` from the seed: the rows' first corpora take every
corpus in proportion to its token share, as a random token would), with the counts the walk had
where one of its corpus-c documents began: at the quantile ``frac(u + g / G)`` stands at in c's
interval, of how far behind c the walk stood there (stratified, so a run of few rows is not
left with all of them far behind). The row then reads its first corpus from within the
document at a seeded token anywhere in its share (a document drawn by length, as a random
token's would be), at its phase: a fraction of the document, the rows starting in one corpus
at evenly spaced phases from a seeded offset (independent of how far behind they stand),
counted from the document's start; every other corpus from the first document after a seeded
token of its share. The expected share of every corpus is then its weight at every
step, as in a stationary process (measured by bench/mix_shares.py, docs/own-corpora.md).

Why real lengths: how far a running row stands behind a corpus where a document begins depends
on the lengths of the documents before it (after a 20,000-token article the other corpus is
read for a long time, far behind). A walk of mean lengths never goes that far: rows started
from it stood 1,000 to 1,400 tokens nearer the weights than running rows do (WikiText-103
articles at 0.3), and the run's share of the long corpus was 3 to 9 points above its weight
until that difference was spread over many steps. Why whole shares: the documents a row reads
first must be drawn as the walk's lengths are, from the whole corpus; rows that all started in
the first few documents of their shares read other documents than the lengths sampled. Why
phases: where a row stands in its first document decides how long it stays in that corpus;
rows that all stood near their documents' ends (or starts) by chance add to how far a run's
share strays (8 rows: 5 to 9 points, sd over seeds, up to step 300); evenly spaced phases take
10 to 20% of that off on 8 rows and about half on 32 (docs/own-corpora.md). A row's phase is
independent of how far behind it stands, as in a running row, so the expected shares stay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MASK64 = (1 << 64) - 1
START_WINDOW_DOCUMENTS = 8
"""Mean documents of a share looked through for where the document at a row's first token
begins (a longer one is counted from there), and ahead for the next document's start."""
SETTLING_DOCUMENTS = 3
"""Mean documents of the corpus with the longest ones a row reads before the run's shares are
close to the weights (docs/own-corpora.md: how close)."""
WARM_UP_CYCLES = 4
"""Cycles of the real-length walk before the documents rows start from (away from the walk's
start, where every corpus is equally behind)."""
WALK_DOCUMENTS = 256
"""Documents of each corpus the walk reads past its warm-up (rows' starts are spread over them)."""
WALK_LIMIT = 200_000
"""Documents the walk reads at most (weights far apart: the rarest corpus gets fewer)."""


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
    the real-length walk)."""
    fractions: list[float]
    """Per corpus, where in its share the row's reading starts, in [0, 1): in the document at
    that token in the first corpus, at the first document after it in the others."""
    phase: float
    """How far into its first document the row starts, as a fraction of the document."""


class MixSchedule:
    """The corpora's weights (normalized), mean document lengths and sampled document lengths,
    and the choices made from them."""

    def __init__(
        self,
        weights: list[float],
        mean_tokens: list[float],
        lengths: list[np.ndarray] | None = None,
    ):
        total = sum(weights)
        self.weights = np.array([w / total for w in weights], np.float64)
        self.mean_tokens = np.array(mean_tokens, np.float64)
        # Without sampled lengths every document has its corpus's mean length.
        self.lengths = lengths or [np.array([max(1, round(m))]) for m in mean_tokens]

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
        begins = self.walk(seed)
        bounds = np.cumsum(self.weights)
        u, v = uniform(seed, -1, 0), uniform(seed, -1, 1)
        xs = [(u + g / global_rows) % 1.0 for g in range(global_rows)]
        firsts = [min(int(np.searchsorted(bounds, x, side="right")), len(bounds) - 1) for x in xs]
        starts = []
        for g, (x, corpus) in enumerate(zip(xs, firsts)):
            within = (x - bounds[corpus] + self.weights[corpus]) / self.weights[corpus]
            found = begins[corpus]  # by how far the corpus stands behind: rows get quantiles
            counts = found[min(int(within * len(found)), len(found) - 1)]
            fractions = [uniform(seed, g, 1 + c) for c in range(len(bounds))]
            phase = (v + firsts[:g].count(corpus) / firsts.count(corpus)) % 1.0
            starts.append(RowStart(corpus, counts, fractions, phase))
        return starts

    def start_window(self, corpus: int) -> int:
        """Tokens of a share looked through around a row's first token (START_WINDOW_DOCUMENTS)."""
        return round(START_WINDOW_DOCUMENTS * self.mean_tokens[corpus])

    def walk(self, seed: int) -> list[list[list[int]]]:
        """Per corpus, the counts where each of its documents began in the schedule walked from
        zero counts with documents of lengths drawn from ``lengths`` (seeded), past the warm-up;
        WALK_DOCUMENTS of each corpus (the first, at the least, when WALK_LIMIT stops it)."""
        rng = np.random.default_rng(splitmix64(seed & MASK64))
        weights, k = self.weights.tolist(), len(self.weights)
        warm_up = WARM_UP_CYCLES * float(np.max(self.mean_tokens / self.weights))
        counts, clock = [0] * k, 0
        begins: list[list[list[int]]] = [[] for _ in range(k)]
        draws: list[list[int]] = [[] for _ in range(k)]
        for _ in range(WALK_LIMIT):
            corpus = max(range(k), key=lambda c: weights[c] * clock - counts[c])
            if clock >= warm_up:
                begins[corpus].append(list(counts))
                if min(map(len, begins)) >= WALK_DOCUMENTS:
                    break
            if not draws[corpus]:
                draws[corpus] = rng.choice(self.lengths[corpus], 4096).tolist()
            length = int(draws[corpus].pop())
            counts[corpus] += length
            clock += length
        behind = [lambda n, c=c: weights[c] * sum(n) - n[c] for c in range(k)]
        return [sorted(found, key=behind[c]) or [list(counts)] for c, found in enumerate(begins)]

    def corpus_at(self, seed: int, row: int, document: int) -> int:
        """The corpus of a row's document in the schedule of stream states of version 1 (drawn
        by hash, with probability proportional to weight / mean document tokens): the document
        such a state's rows stand in when it is resumed."""
        per_document = self.weights / self.mean_tokens
        thresholds = np.cumsum(per_document) / per_document.sum()
        u = uniform(seed, row, document)
        return min(int(np.searchsorted(thresholds, u, side="right")), len(self.weights) - 1)
