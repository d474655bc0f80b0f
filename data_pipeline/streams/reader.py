"""Samples fetched with ranged reads (neighbours coalesced), checked, and kept for the
current block; failed reads become errors naming the shard and sample."""

from __future__ import annotations

import numpy as np

from data_pipeline.shards.errors import (
    DataError,
    ShardMissingError,
    ShardTruncatedError,
    SourceUnreachableError,
)
from data_pipeline.shards.samples import decode_sample
from data_pipeline.shards.storage import Retry, transient
from data_pipeline.streams.order import EpochOrder, shuffle_documents
from data_pipeline.streams.table import SampleTable


class SampleReader:
    """Fetches samples with ranged reads, checks them, and keeps the current block's samples."""

    def __init__(self, table: SampleTable, fs, paths: list[str], retry: Retry):
        self.table, self.fs, self.paths, self.retry = table, fs, paths, retry
        self.cache: dict[int, np.ndarray] = {}
        self.cache_epoch = -1

    def load(self, needed: set[int], order: EpochOrder) -> dict[int, np.ndarray]:
        """Tokens (in epoch document order) of every needed sample."""
        if order.epoch != self.cache_epoch:
            # A new epoch has a new document order inside the samples.
            self.cache, self.cache_epoch = {}, order.epoch
        missing = sorted(needed - self.cache.keys())
        fetched = self.fetch(missing)
        cache = {i: self.cache[i] for i in needed if i in self.cache}
        for i, (tokens, lengths) in fetched.items():
            cache[i], _ = shuffle_documents(tokens, lengths, order, i, self.table.cut_ends(i))
        self.cache = cache
        return cache

    def fetch(self, samples: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Read samples, one ranged read per run of neighbours in one shard."""
        runs = contiguous_runs(samples, self.table.shard_of)
        ranges = [(self.table.byte_range(r[0])[0], self.table.byte_range(r[-1])[1]) for r in runs]
        paths = [self.paths[self.table.shard_of[r[0]]] for r in runs]
        blobs = self.fs.cat_ranges(paths, [a for a, _ in ranges], [b for _, b in ranges])
        out = {}
        for run, (base, _), blob in zip(runs, ranges, blobs):
            shard_no = int(self.table.shard_of[run[0]])
            if isinstance(blob, BaseException):
                raise self.read_error(blob, shard_no, int(self.table.index_in_shard[run[0]]))
            for sample in run:
                lo, hi = self.table.byte_range(sample)
                index, url = int(self.table.index_in_shard[sample]), self.table.urls[shard_no]
                out[sample] = decode_sample(
                    blob[lo - base : hi - base],
                    self.table.shards[shard_no],
                    index,
                    url,
                    self.table.vocab_size,
                )
        return out

    def read_error(self, err: BaseException, shard_no: int, sample: int) -> DataError:
        """A DataError naming the shard and sample for a failed ranged read."""
        url, shard = self.table.urls[shard_no], self.table.shards[shard_no]
        if isinstance(err, FileNotFoundError):
            return ShardMissingError(
                f"{url}: shard missing (reading sample {sample}); re-run txl-prepare"
            )
        if transient(err):  # the retries ran out; asking for the size would wait as long again
            return SourceUnreachableError(
                f"{url}: cannot read sample {sample}, still failing after {self.retry.attempts} "
                f"tries ({type(err).__name__}: {err}); check the storage server and the network, "
                "then resume"
            )
        try:
            size = self.fs.size(self.paths[shard_no])
        except Exception:  # the size is only a better diagnosis; the read error stands
            size = None
        if size is not None and size < shard.bytes:
            return ShardTruncatedError(
                f"{url}: sample {sample} unreadable, shard has {size} of {shard.bytes} bytes; "
                f"re-run txl-prepare"
            )
        return SourceUnreachableError(f"{url}: cannot read sample {sample}: {err!r}")


def contiguous_runs(samples: list[int], shard_of: np.ndarray) -> list[list[int]]:
    """Group sorted sample ids into runs of consecutive ids in the same shard."""
    runs: list[list[int]] = []
    for s in samples:
        if runs and s == runs[-1][-1] + 1 and shard_of[s] == shard_of[runs[-1][-1]]:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs
