"""A mix's rows walked in the prefetch thread: each row's next document drawn by a
counter-based hash, read from where its share of that corpus stands, block after block."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from data_pipeline.shards.format import Manifest
from data_pipeline.streams.shares import CorpusShares

MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """One splitmix64 output for state ``x``: a well-mixed 64-bit hash of a 64-bit integer."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uniform(seed: int, row: int, document: int) -> float:
    """A number in [0, 1) that depends on (seed, row, document) only."""
    h = splitmix64(splitmix64(splitmix64(seed & MASK64) ^ row) ^ document)
    return (h >> 11) / float(1 << 53)


def draw_thresholds(weights: list[float], manifests: list[Manifest]) -> list[float]:
    """Cumulative draw probabilities: weight / mean document tokens, normalized."""
    per_doc = [w * m.documents / m.tokens for w, m in zip(weights, manifests)]
    total = sum(per_doc)
    return list(np.cumsum(per_doc) / total)


@dataclass
class RowCursor:
    """Where a global row stands: its next document's index and each corpus share's place."""

    document: int
    """Index of the document the row's next token belongs to."""
    epochs: list[int]
    """Per corpus, the epoch its share is in."""
    offsets: list[int]
    """Per corpus, tokens of the share read in that epoch."""

    def to_list(self) -> list[int]:
        return [self.document, *self.epochs, *self.offsets]

    @classmethod
    def from_list(cls, values: list[int], corpora: int) -> RowCursor:
        return cls(values[0], list(values[1 : 1 + corpora]), list(values[1 + corpora :]))

    @classmethod
    def start(cls, corpora: int) -> RowCursor:
        """A row at its first document, every share at its start."""
        return cls(0, [0] * corpora, [0] * corpora)

    def copy(self) -> RowCursor:
        return RowCursor(self.document, list(self.epochs), list(self.offsets))


@dataclass
class MixBlock:
    """Consecutive steps of this rank's rows, read in one go, and where the rows stand after
    each of them."""

    first_step: int
    """Step number of the block's first batch."""
    tokens: np.ndarray
    """int32 [rows_per_rank, block width + 1]."""
    cursors: list[list[RowCursor]]
    """Per step of the block, this rank's rows' cursors after it."""


class MixRows:
    """This rank's rows of a mix, walked over the corpora's shares document by document."""

    def __init__(
        self,
        corpora: list[CorpusShares],
        thresholds: list[float],
        seed: int,
        local_rows: range,
        tgt_len: int,
        steps_per_block: int,
    ):
        self.corpora, self.thresholds, self.seed = corpora, thresholds, seed
        self.local_rows, self.rows = local_rows, len(local_rows)
        self.tgt_len, self.steps_per_block = tgt_len, steps_per_block

    def corpus_of(self, row: int, document: int) -> int:
        """The corpus a row's document is drawn from."""
        u = uniform(self.seed, row, document)
        return min(bisect.bisect_right(self.thresholds, u), len(self.corpora) - 1)

    def take(
        self, row: int, cursor: RowCursor, n: int, ahead: int
    ) -> list[tuple[int, int, int, int]]:
        """Advance ``cursor`` (of global ``row``) by ``n`` tokens; their (corpus, epoch, start,
        stop) pieces in virtual token coordinates. Samples are loaded ``ahead`` (>= n) tokens
        ahead, so that the row's next steps find theirs loaded."""
        pieces = []
        while n > 0:
            c = self.corpus_of(row, cursor.document)
            corpus, epoch, offset = self.corpora[c], cursor.epochs[c], cursor.offsets[c]
            base = row * corpus.share
            cap = min(corpus.share, offset + n)
            corpus.load(epoch, base + offset, base + min(corpus.share, offset + ahead))
            stop, ends = corpus.document_stop(epoch, base + offset, base + cap)
            stop -= base
            pieces.append((c, epoch, base + offset, base + stop))
            n, ahead = n - (stop - offset), ahead - (stop - offset)
            cursor.offsets[c] = stop
            if stop == corpus.share:  # the share is read: its next epoch, a new document
                cursor.epochs[c], cursor.offsets[c] = epoch + 1, 0
                ends = True
            if ends:
                cursor.document += 1
        return pieces

    def read(self, pieces: list[tuple[int, int, int, int]]) -> np.ndarray:
        """The tokens of (corpus, epoch, start, stop) pieces, joined."""
        return np.concatenate([self.corpora[c].tokens(e, a, b) for c, e, a, b in pieces])

    def blocks(self, cursors: list[RowCursor], step: int) -> Iterator[MixBlock]:
        """Blocks of steps from ``step`` on, with the rows at ``cursors``, forever."""
        T, steps = self.tgt_len, self.steps_per_block
        while True:
            self.forget_loaded(cursors)
            tokens = np.zeros((self.rows, steps * T + 1), np.int32)
            after: list[list[RowCursor]] = [[] for _ in range(steps)]
            for i, g in enumerate(self.local_rows):
                pieces = []
                for k in range(steps):
                    pieces += self.take(g, cursors[i], T, ahead=(steps - k) * T + 1)
                    after[k].append(cursors[i].copy())
                pieces += self.take(g, cursors[i].copy(), 1, ahead=1)  # the last target
                tokens[i] = self.read(pieces)
            yield MixBlock(step, tokens, after)
            step += steps

    def forget_loaded(self, cursors: list[RowCursor]) -> None:
        """Free the samples behind every local row."""
        for i, corpus in enumerate(self.corpora):
            keep = [
                (c.epochs[i], g * corpus.share + c.offsets[i], (g + 1) * corpus.share)
                for g, c in zip(self.local_rows, cursors)
            ]
            corpus.forget_before(keep)
