"""Which corpus a mix's row reads next, and where each row starts, so that the token shares hold
their weights from the first step.

Next corpus. Where a row's document ends, the group of all rows chooses its next corpus
(``choose``): from every row's tokens, so that the run's shares, not each row's, hold the
weights; each row choosing from its own counts left the run's share of a corpus of long
documents straying by the few rows that hold them (8 rows: 2 to 3 points, sd over seeds, at
steps 60 to 300). The walk below, which places the rows' starts, is a row's own schedule: the
corpus furthest behind its share of the row's tokens, the largest ``weight_c * total -
counts_c``, whose runs a running row stands in.

Start. A row that started every corpus at zero would begin with the same corpus in every row
(the first is furthest behind by a tie) and read a whole first document: the run's share would
be far off for the first documents' worth of tokens. Instead each row starts in the state of a
row that has been running for a while, at one token of a walk of the schedule with documents of
the corpora's real lengths (drawn from each corpus's sampled lengths, past a warm-up of a few
cycles). The walk reads runs: documents of one corpus one after another, between others'. Row g
of G starts in corpus c where ``frac(u + g / G)`` falls in c's interval of the cumulative
weights (``u`` from the seed: the rows' first corpora take every corpus in proportion to its
token share, as a random token would), at the token of c's runs whose run has as many tokens
left as the quantile ``frac(u + g / G)`` stands at in c's interval, among all of c's tokens (of
the runs with that many, a seeded one): with the walk's counts there, and the rest of its
document to read first. The row reads that rest from a document of its share of c long enough
for it (a seeded one of those near a seeded token of the share); every other corpus from the
first document after a seeded token of its share. Each row then stands where a random token of the
walk does, and the expected share of every corpus is its weight at every step, as in a
stationary process (measured by bench/mix_shares.py, docs/own-corpora.md).

Why real lengths: how far a running row stands behind a corpus depends on the lengths of the
documents before it (after a 20,000-token article the other corpus is read for a long time, far
behind). A walk of mean lengths never goes that far: rows started from it stood 1,000 to 1,400
tokens nearer the weights than running rows do (WikiText-103 articles at 0.3), and the run's
share of the long corpus was 3 to 9 points above its weight until that difference was spread
over many steps. Why whole shares: the documents a row reads first must be drawn as the walk's
lengths are, from the whole corpus. Why quantiles of the tokens left: over the circle of
weights the rows stand in corpus c from the ones about to leave it (next to the previous
corpus's rows that stay there longest) to the ones that stay longest (next to the next corpus's
rows about to come to c), so a row more in one corpus is a row less about to come to it: a run
of few rows reads its first steps at the weights, whether 5 or 6 of 8 rows start in a corpus
at 0.7. Rows that stood at points of their first documents of their own strayed by 5 to 7
points (sd over seeds, 8 rows) at step 20; in their runs' order, by 2 (docs/own-corpora.md).
After a run or two the rows' documents are their own, and a run's share strays by what their
lengths make it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    """Where a row starts: its first corpus, the schedule's counts there, what is left of its
    first document, and where in its shares it reads."""

    corpus: int
    """The corpus of the row's first document."""
    counts: list[int]
    """Per corpus, the tokens the schedule counts as read at the row's first token (the
    real-length walk's, at the token the row stands for)."""
    fractions: list[float]
    """Per corpus, where in its share the row's reading starts, in [0, 1): at the first document
    after that token (in the first corpus, the first from there with ``rest`` tokens)."""
    rest: int
    """Tokens of its first document the row reads before the schedule's next choice."""
    pick: float
    """Which of its share's documents with ``rest`` tokens the row reads them from, in [0, 1)."""


@dataclass(frozen=True)
class Run:
    """Documents of one corpus read one after another in the walk, between others'."""

    corpus: int
    """The corpus of its documents."""
    begins: list[list[int]]
    """Per document, the walk's counts where it began."""
    lengths: list[int]
    """Per document, its tokens."""

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    def at(self, left: int) -> tuple[list[int], int]:
        """(counts, rest) at the token ``left`` tokens before the run's end (1 <= left <= its
        tokens): the walk's counts there and the tokens of its document from there on."""
        ends = np.cumsum(self.lengths)
        position = int(ends[-1]) - left
        k = int(np.searchsorted(ends, position, side="right"))
        counts = list(self.begins[k])
        counts[self.corpus] += position - (int(ends[k]) - self.lengths[k])
        return counts, int(ends[k]) - position


class RunTokens:
    """The tokens of one corpus's runs, ordered by how many tokens of their run are left."""

    def __init__(self, runs: list[Run]):
        self.runs = sorted(runs, key=lambda run: run.tokens)
        tokens = np.array([run.tokens for run in self.runs], np.float64)
        self.below = np.concatenate([[0.0], np.cumsum(tokens)])  # tokens of the shorter runs
        # The share of tokens with at most tokens[k] left: all of the k shorter runs', and
        # tokens[k] of each of the others.
        self.cdf = self.below[:-1] + (len(tokens) - np.arange(len(tokens))) * tokens
        self.cdf /= self.below[-1]

    def at(self, quantile: float, pick: float) -> tuple[list[int], int]:
        """(counts, rest) at a token whose run's tokens left stand at ``quantile`` among all
        tokens' (in [0, 1)); of the runs that hold such a token, the one ``pick`` (in [0, 1))
        names."""
        m = len(self.runs)
        k = min(int(np.searchsorted(self.cdf, quantile, side="right")), m - 1)
        left = (quantile * self.below[-1] - self.below[k]) / (m - k)
        run = self.runs[k + int(pick * (m - k))]
        return run.at(max(1, min(run.tokens, math.ceil(left))))


def runs_of(documents: list[tuple[int, list[int], int]], k: int) -> list[list[Run]]:
    """Per corpus, the runs of the walk's (corpus, counts, length) documents; the last run,
    cut where the walk stopped, only where its corpus has no other."""
    runs: list[Run] = []
    for corpus, counts, length in documents:
        if not runs or runs[-1].corpus != corpus:
            runs.append(Run(corpus, [], []))
        runs[-1].begins.append(counts)
        runs[-1].lengths.append(length)
    found = [[run for run in runs[:-1] if run.corpus == c] for c in range(k)]
    return [mine or [run for run in runs if run.corpus == c] for c, mine in enumerate(found)]


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
        self.weight_list = self.weights.tolist()
        # Tokens over which the group's choice weighs the rows in each corpus (choose): the
        # mix's mean document, by weight.
        self.horizon = float(self.weights @ self.mean_tokens)

    def choose(self, counts: Sequence[float], others: Sequence[int], rows: int) -> int:
        """The corpus of a row's next document, from the group's ``counts`` (tokens per corpus,
        every row's, at that token) and ``others`` (the other rows' corpora, counted): the one
        furthest behind once every other row counts as reading its corpus for a horizon more,
        ``D_c + horizon (w_c rows - others_c)`` with D the deficit ``w_c total - counts_c`` (ties:
        the larger deficit, then the first). It is the choice that leaves the deficits
        projected over the horizon, ``sum_c (D_c + horizon (w_c rows - n_c))^2`` with n the rows
        per corpus after it, smallest: a long document's rows are not rounded up where they
        stand near their share, nor held where the deficit grows."""
        total, weights, horizon = float(sum(counts)), self.weight_list, self.horizon
        best, chosen = (-math.inf, -math.inf), 0
        for c, weight in enumerate(weights):
            deficit = weight * total - float(counts[c])
            key = (deficit + horizon * (weight * rows - float(others[c])), deficit)
            if key > best:
                best, chosen = key, c
        return chosen

    def settling_tokens(self) -> tuple[int, int]:
        """(tokens per row, corpus): how many tokens each row reads before the run's shares
        are close to the weights, set by the corpus with the longest documents."""
        longest = int(np.argmax(self.mean_tokens))
        return round(SETTLING_DOCUMENTS * self.mean_tokens[longest]), longest

    def starts(self, seed: int, global_rows: int) -> list[RowStart]:
        """Every global row's start."""
        runs = [RunTokens(found) for found in self.walk(seed)]
        bounds, k = np.cumsum(self.weights), len(self.weights)
        u = uniform(seed, -1, 0)
        starts = []
        for g in range(global_rows):
            x = (u + g / global_rows) % 1.0
            corpus = min(int(np.searchsorted(bounds, x, side="right")), k - 1)
            within = (x - bounds[corpus] + self.weights[corpus]) / self.weights[corpus]
            counts, rest = runs[corpus].at(min(max(within, 0.0), 1.0 - 1e-12), uniform(seed, g, 0))
            fractions = [uniform(seed, g, 1 + c) for c in range(k)]
            pick = uniform(seed, g, 1 + k)
            starts.append(RowStart(corpus, counts, fractions, rest, pick))
        return starts

    def start_window(self, corpus: int) -> int:
        """Tokens of a share looked through around a row's first token (START_WINDOW_DOCUMENTS)."""
        return round(START_WINDOW_DOCUMENTS * self.mean_tokens[corpus])

    def walk(self, seed: int) -> list[list[Run]]:
        """Per corpus, its runs in the schedule walked from zero counts with documents of
        lengths drawn from ``lengths`` (seeded), past the warm-up, until WALK_DOCUMENTS of each
        corpus are read (or WALK_LIMIT documents: a corpus with none gets one of its mean
        length there)."""
        rng = np.random.default_rng(splitmix64(seed & MASK64))
        weights, k = self.weights.tolist(), len(self.weights)
        warm_up = WARM_UP_CYCLES * float(np.max(self.mean_tokens / self.weights))
        counts, clock, read = [0] * k, 0, [0] * k
        documents: list[tuple[int, list[int], int]] = []
        draws: list[list[int]] = [[] for _ in range(k)]
        for _ in range(WALK_LIMIT):
            corpus = max(range(k), key=lambda c: weights[c] * clock - counts[c])
            if not draws[corpus]:
                draws[corpus] = rng.choice(self.lengths[corpus], 4096).tolist()
            length = int(draws[corpus].pop())
            if clock >= warm_up:
                documents.append((corpus, list(counts), length))
                read[corpus] += 1
                if min(read) >= WALK_DOCUMENTS:
                    break
            counts[corpus] += length
            clock += length
        runs = runs_of(documents, k)
        mean = [max(1, round(m)) for m in self.mean_tokens]
        return [found or [Run(c, [list(counts)], [mean[c]])] for c, found in enumerate(runs)]

    def corpus_at(self, seed: int, row: int, document: int) -> int:
        """The corpus of a row's document in the schedule of stream states of version 1 (drawn
        by hash, with probability proportional to weight / mean document tokens): the document
        such a state's rows stand in when it is resumed."""
        per_document = self.weights / self.mean_tokens
        thresholds = np.cumsum(per_document) / per_document.sum()
        u = uniform(seed, row, document)
        return min(int(np.searchsorted(thresholds, u, side="right")), len(self.weights) - 1)
