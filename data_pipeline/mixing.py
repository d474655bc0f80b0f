"""MixedStreams: training batches from several corpora mixed by weight, every row one stream.

Rows. As in TokenStreams there are G = world_size x rows_per_rank global rows and rank r owns rows
``[r * rows_per_rank, (r + 1) * rows_per_rank)``. Each corpus's epoch (its virtual token array of
N tokens, in corpus or shuffled order exactly as streams.py makes it) is cut into G shares of
``N // G`` tokens; row g only ever reads share g of each corpus. A row is a sequence of
documents: at each document boundary it draws the corpus of its next document and reads that
document from where its share of that corpus stands, token after token, so consecutive batches
continue every row and no document is broken. The end of a share ends the document there; the
share then starts again in the corpus's next epoch, in that epoch's own order, and the stream logs
one line the first time each corpus starts an epoch.

Draws. Document k of row g comes from corpus c with probability proportional to
``weight_c / mean_document_tokens_c`` (tokens / documents of the corpus's split, from its
manifest): the tokens a draw brings are then proportional to the weights, so weights are shares of
tokens, not of documents. The draw is a counter-based hash (splitmix64) of (seed, g, k): it needs
no history, and a row's documents do not depend on the world size.

State. Per row: its document index and, per corpus, the epoch and offset of its share; nothing
grows with the steps taken. ``state_dict()`` holds every global row (all ranks' rows, gathered
over torch.distributed), so a state saved on one world size resumes on another with the same
global rows, batch for batch.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from data_pipeline.shards.errors import DataError, VocabMismatchError
from data_pipeline.shards.format import Manifest, load_manifest
from data_pipeline.shards.storage import DEFAULT_RETRY, Retry, filesystem
from data_pipeline.streams import (
    BatchStream,
    EpochOrder,
    Prefetcher,
    SampleReader,
    SampleTable,
    check_layout,
    check_vocab,
    shuffle_documents,
)

log = logging.getLogger(__name__)

STATE_KIND = "mix"
STATE_VERSION = 1
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


@dataclass(frozen=True)
class MixSource:
    """One corpus of the mix: its name, the manifest URL of the split read, and its weight."""

    name: str
    """Key of mix_tokens."""
    url: str
    """Manifest URL of the split."""
    weight: float
    """Share of the tokens, relative to the other sources' weights."""


def check_same_vocabulary(names: list[str], manifests: list[Manifest]) -> None:
    """Raise VocabMismatchError, naming two corpora that differ, unless all share one
    vocabulary or tokenizer (same sha256 and size)."""
    first = manifests[0]
    for name, manifest in zip(names[1:], manifests[1:]):
        if (manifest.vocab_sha256, manifest.vocab_size) != (first.vocab_sha256, first.vocab_size):
            raise VocabMismatchError(
                f"data.mix: corpora {names[0]} and {name} have different vocabularies "
                f"({first.vocab_size} tokens, sha256 {first.vocab_sha256[:12]} vs "
                f"{manifest.vocab_size}, {manifest.vocab_sha256[:12]}); prepare them with one "
                "tokenizer (txl-prepare --tokenizer FILE, or --vocab FILE)"
            )


def draw_thresholds(weights: list[float], manifests: list[Manifest]) -> list[float]:
    """Cumulative draw probabilities: weight / mean document tokens, normalized."""
    per_doc = [w * m.documents / m.tokens for w, m in zip(weights, manifests)]
    total = sum(per_doc)
    return list(np.cumsum(per_doc) / total)


@dataclass(frozen=True)
class Reading:
    """How the corpora are read: storage, retries, and how far ahead."""

    storage_options: dict | None = None
    """fsspec storage options of the corpora's URLs."""
    retry: Retry = DEFAULT_RETRY
    """Retries of remote reads."""
    prefetch: int = 2
    """Blocks read ahead in the background."""
    block_tokens: int = 1 << 16
    """Tokens per rank read in one block (a walk over documents in Python: smaller blocks than
    TokenStreams', so the prefetch stays a few hundred steps ahead)."""


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

    def copy(self) -> RowCursor:
        return RowCursor(self.document, list(self.epochs), list(self.offsets))


class CorpusShares:
    """One corpus's epochs, cut into G shares; reads tokens and document ends of any range."""

    def __init__(
        self,
        source: MixSource,
        manifest: Manifest,
        global_rows: int,
        reading: Reading,
        order: str,
        seed: int,
    ):
        self.name, self.manifest = source.name, manifest
        self.table = SampleTable(manifest, source.url)
        options, retry = reading.storage_options, reading.retry
        fs, _ = filesystem(source.url, options, retry)
        paths = [filesystem(u, options, retry)[1] for u in self.table.urls]
        self.reader = SampleReader(self.table, fs, paths, retry)
        self.order, self.seed = order, seed
        self.share = manifest.tokens // global_rows
        if self.share < 1:
            raise DataError(
                f"{source.url}: {manifest.tokens} tokens are too few for {global_rows} rows; "
                "use fewer rows or a larger corpus"
            )
        self.orders: dict[int, EpochOrder] = {}
        self.samples: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The epoch's sample order (the newest few are kept)."""
        if epoch not in self.orders:
            if len(self.orders) >= 4:
                del self.orders[min(self.orders)]
            self.orders[epoch] = EpochOrder.of(self.table, self.order, self.seed, epoch)
        return self.orders[epoch]

    def load(self, epoch: int, start: int, stop: int) -> None:
        """Fetch (in one go) the samples of ``epoch`` that cover virtual tokens [start, stop)."""
        order = self.epoch_order(epoch)
        first = int(np.searchsorted(order.starts, start, side="right")) - 1
        last = int(np.searchsorted(order.starts, stop, side="left"))
        missing = [j for j in range(first, last) if (epoch, j) not in self.samples]
        if not missing:
            return
        fetched = self.reader.fetch(sorted(int(order.samples[j]) for j in missing))
        for j in missing:
            sample = int(order.samples[j])
            tokens, lengths = fetched[sample]
            cut = self.table.cut_ends(sample)
            tokens, lengths = shuffle_documents(tokens, lengths, order, sample, cut)
            ends = np.cumsum(lengths, dtype=np.int64)
            if cut[1]:  # the last entry is a piece: its document goes on in the next sample
                ends = ends[:-1]
            self.samples[(epoch, j)] = tokens, ends

    def document_stop(self, epoch: int, start: int, cap: int) -> tuple[int, bool]:
        """(stop, ends): the first document end after ``start`` if it is <= ``cap`` (ends True),
        else ``cap`` (ends False); samples up to ``cap`` must be loaded."""
        order = self.epoch_order(epoch)
        j = int(np.searchsorted(order.starts, start, side="right")) - 1
        while order.starts[j] < cap:
            _, ends = self.samples[(epoch, j)]
            after = ends[ends > start - order.starts[j]]
            if len(after):
                stop = int(order.starts[j] + after[0])
                return (stop, True) if stop <= cap else (cap, False)
            j += 1
        return cap, False

    def tokens(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """Virtual tokens [start, stop) of ``epoch`` (their samples loaded)."""
        order = self.epoch_order(epoch)
        return np.concatenate(
            [self.samples[(epoch, j)][0][a:b] for j, a, b in self.positions(order, start, stop)]
        )

    @staticmethod
    def positions(order: EpochOrder, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(epoch-order index, begin, end) pieces covering virtual tokens [start, stop)."""
        first = int(np.searchsorted(order.starts, start, side="right")) - 1
        last = int(np.searchsorted(order.starts, stop, side="left"))
        for j in range(first, last):
            base = int(order.starts[j])
            yield j, max(start, base) - base, min(stop, int(order.starts[j + 1])) - base

    def forget_before(self, keep: list[tuple[int, int, int]]) -> None:
        """Drop loaded samples no row needs again: ``keep`` holds each local row's (epoch,
        position, share end); a sample stays if it reaches past a row's position in its share
        (or lies in a later epoch)."""

        def needed(epoch: int, j: int) -> bool:
            starts = self.orders[epoch].starts if epoch in self.orders else None
            return any(
                epoch > row_epoch
                or (epoch == row_epoch and starts is not None and starts[j] < end)
                and starts[j + 1] > position
                for row_epoch, position, end in keep
            )

        self.samples = {k: v for k, v in self.samples.items() if needed(*k)}


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


def all_ranks(rows: list[list[int]], world_size: int) -> list[list[int]]:
    """Every rank's rows, in rank order (this rank's alone on one process)."""
    if world_size == 1:
        return rows
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, rows)
    return [row for part in gathered for row in part]


class MixedStreams(BatchStream):
    """Batches ``(input_ids, targets)``, int64 ``[rows_per_rank, tgt_len]``, for one rank, from
    several corpora mixed by weight; the interface of a training TokenStreams."""

    def __init__(
        self,
        sources: list[MixSource],
        rows_per_rank: int,
        tgt_len: int,
        *,
        reading: Reading = Reading(),
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        order: str = "corpus",
        expected_vocab_size: int | None = None,
    ):
        check_layout(order, rank, world_size, rows_per_rank, tgt_len)
        self.names = [s.name for s in sources]
        manifests = [load_manifest(s.url, reading.storage_options, reading.retry) for s in sources]
        check_same_vocabulary(self.names, manifests)
        self.manifest = manifests[0]
        if expected_vocab_size is not None:
            check_vocab(self.manifest, sources[0].url, expected_vocab_size)
        self.thresholds = draw_thresholds([s.weight for s in sources], manifests)
        self.rank, self.rows, self.world_size = rank, rows_per_rank, world_size
        self.global_rows, self.tgt_len = world_size * rows_per_rank, tgt_len
        self.seed, self.order, self.prefetch = seed, order, reading.prefetch
        self.corpora = [
            CorpusShares(s, m, self.global_rows, reading, order, seed)
            for s, m in zip(sources, manifests)
        ]
        self.steps_per_block = max(1, reading.block_tokens // (rows_per_rank * tgt_len))
        self.cursors = [self.fresh_cursor() for _ in range(rows_per_rank)]
        self.next_step = 0
        self.epoch, self.step, self.new_epoch = 0, -1, False
        self.announced = {(i, 0) for i in range(len(sources))}  # (corpus, epoch) logged

    # ---- the interface the trainer and checkpoints use

    @property
    def local_rows(self) -> range:
        """Global row numbers of this rank's rows."""
        return range(self.rank * self.rows, (self.rank + 1) * self.rows)

    def fresh_cursor(self) -> RowCursor:
        return RowCursor(0, [0] * len(self.corpora), [0] * len(self.corpora))

    def row_states(self) -> list[list[int]]:
        """This rank's rows' cursors as lists of ints (the next batch's position)."""
        return [c.to_list() for c in self.cursors]

    def state_dict(self) -> dict:
        """Position of the next batch, every global row's; the same on every rank (a collective
        on more than one rank: every rank must call it)."""
        return self.state_of(all_ranks(self.row_states(), self.world_size))

    def state_of(self, rows: list[list[int]]) -> dict:
        """The state dict of the global rows' cursors ``rows``."""
        return {
            "version": STATE_VERSION,
            "kind": STATE_KIND,
            "step": self.next_step,
            "seed": self.seed,
            "order": self.order,
            "global_rows": self.global_rows,
            "tgt_len": self.tgt_len,
            "corpora": list(self.names),
            "rows": rows,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position (seed and order come from the state)."""
        if state.get("kind") != STATE_KIND:
            raise ValueError(
                "stream state is of one corpus (data.path), this stream mixes corpora "
                "(data.mix); resume a run with the data it was trained on"
            )
        for key in ("global_rows", "tgt_len", "corpora"):
            mine = self.names if key == "corpora" else getattr(self, key)
            if state[key] != mine:
                raise ValueError(
                    f"stream state has {key}={state[key]}, this stream {mine}; resume with the "
                    "same global rows (world_size x rows_per_rank), tgt_len and data.mix names"
                )
        self.close()
        self.seed, self.order, self.next_step = state["seed"], state["order"], state["step"]
        for corpus in self.corpora:
            corpus.seed, corpus.order, corpus.orders, corpus.samples = self.seed, self.order, {}, {}
        self.cursors = [
            RowCursor.from_list(state["rows"][g], len(self.corpora)) for g in self.local_rows
        ]
        self.announced = {
            (i, e) for c in self.cursors for i, last in enumerate(c.epochs) for e in range(last + 1)
        }

    def mix_tokens(self) -> dict[str, int]:
        """Tokens drawn so far from each corpus by all global rows (a collective, as
        state_dict)."""
        return self.tokens_drawn(all_ranks(self.row_states(), self.world_size))

    def tokens_drawn(self, rows: list[list[int]]) -> dict[str, int]:
        """Tokens the rows with cursors ``rows`` read from each corpus so far."""
        cursors = [RowCursor.from_list(r, len(self.corpora)) for r in rows]
        return {
            c.name: sum(r.epochs[i] * c.share + r.offsets[i] for r in cursors)
            for i, c in enumerate(self.corpora)
        }

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.close()
        start = [c.copy() for c in self.cursors]
        self.active = Prefetcher(self.blocks(start, self.next_step), self.prefetch)
        return self.batches(self.active)

    # ---- reading (in the prefetch thread)

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

    def announce_epochs(self) -> None:
        """Log once per corpus and epoch, when the first row here gets there, that a corpus
        ran out and starts over (at the batch that reaches it, not when it is read ahead)."""
        for i, name in enumerate(self.names):
            row, cursor = max(zip(self.local_rows, self.cursors), key=lambda rc: rc[1].epochs[i])
            if (i, cursor.epochs[i]) not in self.announced:
                self.announced.add((i, cursor.epochs[i]))
                log.info(
                    f"mix: corpus {name} ran out in row {row}; its epoch {cursor.epochs[i]} "
                    "starts, in its own order"
                )

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

    def batches(self, prefetcher: Prefetcher) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Cut blocks into batches, tracking the position for state_dict()."""
        T = self.tgt_len
        try:
            for block in prefetcher:
                for k, cursors in enumerate(block.cursors):
                    chunk = block.tokens[:, k * T : (k + 1) * T + 1].astype(np.int64)
                    self.step = block.first_step + k
                    self.new_epoch = self.step == 0
                    self.cursors = cursors
                    self.announce_epochs()
                    self.next_step = self.step + 1
                    yield torch.from_numpy(chunk[:, :-1]), torch.from_numpy(chunk[:, 1:])
        finally:
            prefetcher.close()
