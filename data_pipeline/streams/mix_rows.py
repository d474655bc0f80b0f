"""A mix's rows walked in the prefetch thread: each row's next document from the corpus its
schedule names, read from where its share of that corpus stands, block after block."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from data_pipeline.streams.mix_schedule import MixSchedule, RowStart
from data_pipeline.streams.shares import CorpusShares

SEARCH_DOCUMENTS = 64
"""Documents of a share looked through for a row's first one, long enough for its start's rest
(the walk's documents are drawn from the same lengths: few are longer than all 64)."""


@dataclass
class RowCursor:
    """Where a global row stands: the corpus of the document it is in, each corpus share's
    place, and what the schedule counts."""

    corpus: int
    """The corpus of the document the row's next token belongs to."""
    epochs: list[int]
    """Per corpus, the epoch its share is in."""
    offsets: list[int]
    """Per corpus, tokens of the share read in that epoch (the skipped ones included)."""
    counts: list[int]
    """Per corpus, the tokens the schedule counts: its start's, then every token read."""
    skipped: list[int]
    """Per corpus, tokens of its share's first epoch the row started after (not read)."""

    def to_list(self) -> list[int]:
        return [self.corpus, *self.epochs, *self.offsets, *self.counts, *self.skipped]

    @classmethod
    def from_list(cls, values: list[int], corpora: int) -> RowCursor:
        k = corpora
        fields = [list(values[1 + i * k : 1 + (i + 1) * k]) for i in range(4)]
        return cls(values[0], *fields)

    @classmethod
    def start(cls, start: RowStart, offsets: list[int]) -> RowCursor:
        """A row at its start: ``offsets[c]`` tokens into each corpus's share (skipped, not
        read), counting as the start's counts."""
        skipped = list(offsets)
        return cls(start.corpus, [0] * len(offsets), list(offsets), list(start.counts), skipped)

    def read(self, shares: list[int]) -> list[int]:
        """Per corpus, the tokens this row has read (``shares``: each corpus's share length)."""
        return [
            e * share + o - s
            for e, o, s, share in zip(self.epochs, self.offsets, self.skipped, shares)
        ]

    def copy(self) -> RowCursor:
        return RowCursor(
            self.corpus, list(self.epochs), list(self.offsets), list(self.counts),
            list(self.skipped),
        )  # fmt: skip


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
        schedule: MixSchedule,
        local_rows: range,
        tgt_len: int,
        steps_per_block: int,
    ):
        self.corpora, self.schedule = corpora, schedule
        self.local_rows, self.rows = local_rows, len(local_rows)
        self.tgt_len, self.steps_per_block = tgt_len, steps_per_block

    def start(self, row: int, start: RowStart) -> RowCursor:
        """Global ``row``'s cursor at ``start``: in every share at the first document that
        begins after a token drawn from the whole share; in its first corpus's, from there in
        a document with the start's rest of tokens, that many before its end. A row's first
        documents are then drawn from its whole shares, as a running row's are."""
        offsets = [int(f * c.share) for f, c in zip(start.fractions, self.corpora)]
        offsets = [self.next_begin(row, c, offset) for c, offset in enumerate(offsets)]
        offsets[start.corpus] = self.rest_before_end(
            row, start.corpus, offsets[start.corpus], start.rest, start.pick
        )
        return RowCursor.start(start, offsets)

    def rest_before_end(self, row: int, c: int, begin: int, rest: int, pick: float) -> int:
        """Where ``rest`` tokens of a document of global ``row``'s share of corpus ``c`` are
        left: in the one ``pick`` (in [0, 1)) names of the documents with that many among
        SEARCH_DOCUMENTS from ``begin`` on (on from the share's start after its end; one longer
        than the start window counts as the part inside it, its rest then longer), else at the
        start of the longest of them. Any such document, not the first: every one of the
        share's holds a token with ``rest`` left, and the row stands at one of them."""
        share, first, wrapped = self.corpora[c].share, begin, False
        found: list[tuple[int, int]] = []
        for _ in range(SEARCH_DOCUMENTS):
            stop, ends = self.document_end(row, c, begin)
            found.append((begin, stop))
            if stop < share and not ends:  # longer than the start window: its end is not known
                break
            begin, wrapped = (0, True) if stop >= share else (stop, wrapped)
            if wrapped and begin >= first:
                break
        held = [stop - rest for begin, stop in found if stop - begin >= rest]
        if held:
            return held[int(pick * len(held))]
        return max(found, key=lambda piece: piece[1] - piece[0])[0]

    def next_begin(self, row: int, c: int, offset: int) -> int:
        """Where the first document after ``offset`` of global ``row``'s share of corpus ``c``
        begins (``offset`` itself when none begins in the start window after it)."""
        stop, ends = self.document_end(row, c, offset)
        return stop if ends and stop < self.corpora[c].share else offset

    def document_end(self, row: int, c: int, offset: int) -> tuple[int, bool]:
        """(stop, ends): where the document at ``offset`` of global ``row``'s share of corpus
        ``c`` stops: at its end (ends True), else at the share's or the start window's end."""
        corpus = self.corpora[c]
        base = row * corpus.share
        cap = base + min(corpus.share, offset + self.schedule.start_window(c))
        corpus.load(0, base + offset, cap)
        stop, ends = corpus.document_stop(0, base + offset, cap)
        return stop - base, ends

    def take(
        self, row: int, cursor: RowCursor, n: int, ahead: int
    ) -> list[tuple[int, int, int, int]]:
        """Advance ``cursor`` (of global ``row``) by ``n`` tokens; their (corpus, epoch, start,
        stop) pieces in virtual token coordinates. Samples are loaded ``ahead`` (>= n) tokens
        ahead, so that the row's next steps find theirs loaded."""
        pieces = []
        while n > 0:
            c = cursor.corpus
            corpus, epoch, offset = self.corpora[c], cursor.epochs[c], cursor.offsets[c]
            base = row * corpus.share
            cap = min(corpus.share, offset + n)
            corpus.load(epoch, base + offset, base + min(corpus.share, offset + ahead))
            stop, ends = corpus.document_stop(epoch, base + offset, base + cap)
            stop -= base
            pieces.append((c, epoch, base + offset, base + stop))
            n, ahead = n - (stop - offset), ahead - (stop - offset)
            cursor.offsets[c] = stop
            cursor.counts[c] += stop - offset
            if stop == corpus.share:  # the share is read: its next epoch, a new document
                cursor.epochs[c], cursor.offsets[c] = epoch + 1, 0
                ends = True
            if ends:
                cursor.corpus = self.schedule.next_corpus(cursor.counts)
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
