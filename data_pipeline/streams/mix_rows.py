"""A mix's rows walked in the prefetch thread, all global rows together on every rank: each
row's next document from the corpus the group schedule names where its document ends, read from
where its share of that corpus stands, block after block; tokens are read for this rank's rows,
the other rows' document ends alone (from the samples' length arrays)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from data_pipeline.streams.mix_schedule import MixSchedule, RowStart
from data_pipeline.streams.shares import CorpusShares

Piece = tuple[int, int, int, int]
"""(corpus, epoch, start, stop): tokens of one document of a share, in virtual coordinates."""

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
    """Consecutive steps of this rank's rows, read in one go, and where every global row stands
    after each of them."""

    first_step: int
    """Step number of the block's first batch."""
    tokens: np.ndarray
    """int32 [rows_per_rank, block width + 1]."""
    cursors: list[list[RowCursor]]
    """Per step of the block, every global row's cursor after it."""


class MixRows:
    """A mix's global rows, walked over the corpora's shares document by document."""

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
        # Per corpus, tokens the group's counts start from (mix_offsets.py; set by the stream).
        self.offsets = np.zeros(len(corpora), np.int64)
        # Per row, ((corpus, epoch), stop, ends) of its document (stop_ahead), per walk.
        self.stops: dict[int, tuple[tuple[int, int], int, bool]] = {}

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
        corpus.load(0, base + offset, cap, tokens=row in self.local_rows)
        stop, ends = corpus.document_stop(0, base + offset, cap)
        return stop - base, ends

    def piece(self, row: int, cursor: RowCursor, n: int, ahead: int) -> tuple[Piece, bool]:
        """Advance ``cursor`` (of global ``row``) by at most ``n`` tokens of the document it is
        in: its piece, and whether the document ended there (a share's end ends one)."""
        c = cursor.corpus
        corpus, epoch, offset = self.corpora[c], cursor.epochs[c], cursor.offsets[c]
        stop, ends = self.stop_ahead(row, c, epoch, offset, ahead)
        if stop > offset + n:
            stop, ends = offset + n, False
        cursor.offsets[c] = stop
        cursor.counts[c] += stop - offset
        if stop == corpus.share:  # the share is read: its next epoch, a new document
            cursor.epochs[c], cursor.offsets[c] = epoch + 1, 0
            ends = True
        base = row * corpus.share
        return (c, epoch, base + offset, base + stop), ends

    def stop_ahead(self, row: int, c: int, epoch: int, offset: int, ahead: int) -> tuple[int, bool]:
        """(stop, ends): where the document at ``offset`` of global ``row``'s share of corpus
        ``c`` stops within ``ahead`` tokens (ends False: not by then), its samples loaded (this
        rank's rows' with their tokens). Kept until the row passes it: a row in a long document
        costs a comparison a step, which matters as every rank walks every row."""
        known = self.stops.get(row)
        if known is not None and known[0] == (c, epoch) and known[1] > offset:
            return known[1], known[2]
        corpus = self.corpora[c]
        base = row * corpus.share
        limit = base + min(corpus.share, offset + ahead)
        corpus.load(epoch, base + offset, limit, tokens=row in self.local_rows)
        stop, ends = corpus.document_stop(epoch, base + offset, limit)
        self.stops[row] = ((c, epoch), stop - base, ends)
        return stop - base, ends

    def step(
        self, cursors: list[RowCursor], counts: np.ndarray, n: int, ahead: int
    ) -> list[list[Piece]]:
        """Advance every global row's cursor by ``n`` tokens, together: the rows' document ends
        taken in the order of the token they fall on (ties by row), each row's next corpus
        chosen from the group's counts and the other rows' corpora at that token. ``counts``
        (every row's tokens per corpus, and the offsets) goes on with them. Per row, its
        pieces."""
        k, rows = len(self.corpora), len(cursors)
        pieces: list[list[Piece]] = [[] for _ in cursors]
        reached = [0] * rows  # tokens of the step each row has read
        # Per corpus, the rows in it and the tokens of the step they have read: every row's
        # tokens up to token t are then counts - (read_in - rows_in * t), in O(corpora).
        rows_in = np.bincount([c.corpus for c in cursors], minlength=k)
        read_in = np.zeros(k, np.int64)
        ends: list[tuple[int, int]] = []

        def read_on(g: int) -> None:
            while reached[g] < n:
                done = reached[g]
                piece, ended = self.piece(g, cursors[g], n - done, ahead - done)
                pieces[g].append(piece)
                got = piece[3] - piece[2]
                reached[g] += got
                counts[piece[0]] += got
                read_in[piece[0]] += got
                if ended:
                    heapq.heappush(ends, (reached[g], g))
                    return

        for g in range(rows):
            read_on(g)
        while ends:
            t, g = heapq.heappop(ends)
            at_t = counts - (read_in - rows_in * t)
            old = cursors[g].corpus
            rows_in[old] -= 1
            read_in[old] -= t
            new = cursors[g].corpus = self.schedule.choose(at_t, rows_in, rows)
            rows_in[new] += 1
            read_in[new] += t
            read_on(g)
        return pieces

    def read(self, pieces: list[tuple[int, int, int, int]]) -> np.ndarray:
        """The tokens of (corpus, epoch, start, stop) pieces, joined."""
        return np.concatenate([self.corpora[c].tokens(e, a, b) for c, e, a, b in pieces])

    def blocks(self, cursors: list[RowCursor], step: int) -> Iterator[MixBlock]:
        """Blocks of steps from ``step`` on, with the global rows at ``cursors``, forever."""
        T, steps = self.tgt_len, self.steps_per_block
        self.stops = {}
        shares = [c.share for c in self.corpora]
        counts = self.offsets + np.sum([c.read(shares) for c in cursors], axis=0, dtype=np.int64)
        while True:
            self.forget_loaded(cursors)
            pieces: list[list[Piece]] = [[] for _ in self.local_rows]
            after: list[list[RowCursor]] = []
            for k in range(steps):
                walked = self.step(cursors, counts, T, ahead=(steps - k) * T + 1)
                for i, g in enumerate(self.local_rows):
                    pieces[i] += walked[g]
                after.append([c.copy() for c in cursors])
            beyond = [c.copy() for c in cursors]
            last = self.step(beyond, counts.copy(), 1, ahead=1)  # the last target
            tokens = np.zeros((self.rows, steps * T + 1), np.int32)
            for i, g in enumerate(self.local_rows):
                tokens[i] = self.read(pieces[i] + last[g])
            yield MixBlock(step, tokens, after)
            step += steps

    def forget_loaded(self, cursors: list[RowCursor]) -> None:
        """Free the samples behind every global row."""
        for i, corpus in enumerate(self.corpora):
            keep = [
                (c.epochs[i], g * corpus.share + c.offsets[i], (g + 1) * corpus.share)
                for g, c in enumerate(cursors)
            ]
            corpus.forget_before(keep)
