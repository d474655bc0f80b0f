"""One corpus of a mix: its epochs cut into one share per global row, the tokens and document
ends of any range of a share, its samples loaded ahead and freed behind."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from data_pipeline.shards.errors import DataError, ShardCorruptError
from data_pipeline.shards.format import Manifest
from data_pipeline.shards.storage import filesystem
from data_pipeline.streams.order import EpochOrder, document_permutation, shuffle_documents
from data_pipeline.streams.reader import SampleReader
from data_pipeline.streams.reading import Reading
from data_pipeline.streams.table import SampleTable


@dataclass(frozen=True)
class MixSource:
    """One corpus of the mix: its name, the manifest URL of the split read, and its weight."""

    name: str
    """Key of mix_tokens."""
    url: str
    """Manifest URL of the split."""
    weight: float
    """Share of the tokens, relative to the other sources' weights."""


LENGTH_SAMPLES = 256
"""Samples, spread evenly over a corpus, whose documents' lengths stand for all of its own (read
from the samples' length arrays alone: a few hundred small reads)."""


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
        # (epoch, epoch-order index) -> (tokens, None where only the ends were read; ends)
        self.samples: dict[tuple[int, int], tuple[np.ndarray | None, np.ndarray]] = {}

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The epoch's sample order (the newest few are kept)."""
        if epoch not in self.orders:
            if len(self.orders) >= 4:
                del self.orders[min(self.orders)]
            self.orders[epoch] = EpochOrder.of(self.table, self.order, self.seed, epoch)
        return self.orders[epoch]

    def load(self, epoch: int, start: int, stop: int, tokens: bool = True) -> None:
        """Fetch (in one go) the samples of ``epoch`` that cover virtual tokens [start, stop):
        with their tokens, or (``tokens`` False) their document ends alone, from their length
        arrays (another rank's rows: where their documents end, not what they hold)."""
        order = self.epoch_order(epoch)
        first = int(np.searchsorted(order.starts, start, side="right")) - 1
        last = int(np.searchsorted(order.starts, stop, side="left"))
        missing = [j for j in range(first, last) if not self.loaded(epoch, j, tokens)]
        if not missing:
            return
        wanted = sorted(int(order.samples[j]) for j in missing)
        if tokens:
            fetched = self.reader.fetch(wanted)
        else:
            fetched = {k: (None, lengths) for k, lengths in self.entry_lengths(wanted).items()}
        for j in missing:
            sample = int(order.samples[j])
            found, lengths = fetched[sample]
            cut = self.table.cut_ends(sample)
            if found is not None:
                found, lengths = shuffle_documents(found, lengths, order, sample, cut)
            else:
                perm = document_permutation(order, sample, len(lengths), cut)
                lengths = lengths if perm is None else lengths[perm]
            ends = np.cumsum(lengths, dtype=np.int64)
            if cut[1]:  # the last entry is a piece: its document goes on in the next sample
                ends = ends[:-1]
            self.samples[(epoch, j)] = found, ends

    def loaded(self, epoch: int, j: int, tokens: bool) -> bool:
        """Whether epoch-order sample ``j`` is loaded (with its tokens, if ``tokens``)."""
        held = self.samples.get((epoch, j))
        return held is not None and (held[0] is not None or not tokens)

    def document_lengths(self) -> np.ndarray:
        """Lengths of the documents that begin in LENGTH_SAMPLES samples spread evenly over the
        corpus (all of them in a smaller one), a document cut between samples whole, then cut
        where shares end: every document is in it with the same chance, so its lengths are
        distributed as the ones rows read."""
        n, continues = len(self.table), self.table.continues
        sample_starts = np.cumsum(self.table.tokens) - self.table.tokens
        picked = sorted({int(k) for k in np.linspace(0, n - 1, min(n, LENGTH_SAMPLES)).round()})
        ends = {k: self.last_piece(k) for k in picked if self.table.cut_ends(k)[1]}
        entries = self.entry_lengths(sorted(set(picked) | set(ends.values())))
        found = []
        for k in picked:
            lengths = entries[k][1:] if continues[k] else entries[k].copy()
            if len(lengths) and k in ends:  # its last document goes on to sample ends[k]
                j = ends[k]
                lengths[-1] += self.table.tokens[k + 1 : j].sum() + entries[j][0]
            first = sample_starts[k] + (entries[k][0] if continues[k] else 0)
            found.append(self.cut_at_shares(first + np.cumsum(lengths) - lengths, lengths))
        return np.concatenate(found)

    def cut_at_shares(self, begins: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The pieces that documents at corpus positions ``begins`` leave where shares end
        (a row reads its share round and round: a piece is a document to it); none past the
        last share, which no row reads."""
        read = self.share * (self.manifest.tokens // self.share)
        pieces = []
        for begin, length in zip(begins.tolist(), lengths.tolist()):
            cuts = range((begin // self.share + 1) * self.share, begin + length, self.share)
            points = [begin, *cuts, min(begin + length, read)]
            pieces += [b - a for a, b in zip(points, points[1:]) if b > a]
        return np.array(pieces, np.int64)

    def last_piece(self, sample: int) -> int:
        """The sample in which the document cut at the end of ``sample`` ends."""
        j = sample + 1
        while self.table.cut_ends(j)[1]:
            j += 1
        return j

    def entry_lengths(self, samples: list[int]) -> dict[int, np.ndarray]:
        """The length arrays of ``samples`` (int64), read alone, checked against the manifest."""
        table, reader = self.table, self.reader
        shards = [table.shards[table.shard_of[k]] for k in samples]
        index = [int(table.index_in_shard[k]) for k in samples]
        starts = [s.lengths_offsets[i] for s, i in zip(shards, index)]
        stops = [a + 4 * s.sample_documents[i] for a, s, i in zip(starts, shards, index)]
        paths = [reader.paths[table.shard_of[k]] for k in samples]
        blobs = reader.fs.cat_ranges(paths, starts, stops)
        found = {}
        for k, shard, i, stop, start, blob in zip(samples, shards, index, stops, starts, blobs):
            if isinstance(blob, BaseException):
                raise reader.read_error(blob, int(table.shard_of[k]), i)
            lengths = np.frombuffer(blob, "<i4").astype(np.int64)
            if (
                len(blob) != stop - start
                or lengths.min(initial=0) < 0
                or (lengths.sum() != shard.sample_tokens[i])
            ):
                raise ShardCorruptError(
                    f"{table.urls[table.shard_of[k]]}: sample {i}'s document lengths do not add "
                    "up to its tokens; re-run txl-prepare"
                )
            found[k] = lengths
        return found

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

    def document_start(self, epoch: int, floor: int, position: int) -> int:
        """Where the document at ``position`` begins: the last document end at or before it,
        or ``floor`` if none is at or after ``floor`` (loads the samples between)."""
        self.load(epoch, floor, position + 1)
        order, begins = self.epoch_order(epoch), floor
        for j, _, _ in self.positions(order, floor, position + 1):
            ends = order.starts[j] + self.samples[(epoch, j)][1]
            inside = ends[(ends > floor) & (ends <= position)]
            if len(inside):
                begins = int(inside[-1])
        return begins

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
