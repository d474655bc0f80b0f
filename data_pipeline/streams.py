"""TokenStreams: per-rank batches whose rows are contiguous across steps, from sharded storage.

Layout. An epoch is one virtual token array of length N: the split's samples concatenated in the
epoch's order. ``order="corpus"`` keeps corpus order (WikiText, enwik8); ``order="shuffle"``
(lm1b) permutes the samples and the documents inside each sample with a generator seeded by
``(seed, epoch)`` (and the sample id), so each epoch is a new document order that every rank
computes identically. A document cut into pieces over several samples (shards/) is never broken
by the shuffle, as the reference's shuffled iterator never breaks a sentence: the samples it spans
move as one, in order, and its pieces stay last and first in their samples. There are
G = world_size x rows_per_rank global rows; rank r owns rows
``[r * rows_per_rank, (r + 1) * rows_per_rank)``.

Training (``tail=False``): row g is ``[g*L, (g+1)*L)`` with ``L = N // G``; there are
``steps = (L - 1) // tgt_len`` steps and step s of row g has inputs ``[g*L + s*T, +T)`` and
targets one token later. Row b of a batch continues row b of the previous batch token for token;
every rank has the same number of steps; no token is read by two rows, except that the first input
of a step is the last target of the previous one; what is left out is the row tail shorter than one
step (plus the ``N - G*L < G`` tokens after the last row). After the last step of epoch e comes
step 0 of epoch e+1: rows restart at ``g*L`` (of a new order for ``shuffle``), so continuity
breaks there; ``new_epoch`` is True for the first batch of each epoch so the caller can reset
its memory.

Evaluation (``tail=True``): every token except the split's first is predicted exactly once. The
``N - 1`` (input, target) pairs are cut into G rows of ``L = ceil((N-1)/G)`` pairs (the last rows
may be shorter or empty); ``steps = ceil(L / tgt_len)`` and the last batch may be narrower in
time. Positions past a row's end hold input 0 and target ``IGNORE_INDEX`` (-100, the default
ignore_index of ``torch.nn.functional.cross_entropy``); they only ever follow real positions, so
they cannot change a scored prediction. Each ``iter()`` of a tail stream is one full pass.

State: ``state_dict()`` is ``{epoch, step, seed, order, global_rows, tgt_len}`` of the next batch:
O(1) and independent of the world size, so a state saved with world size 2 resumes on world size
1 (same global rows) with identical global batches.

Reading: a background thread reads blocks of about ``block_tokens`` tokens per rank ahead (a
bounded queue of ``prefetch`` blocks). For a block it maps each row's token range to samples
with ``np.searchsorted`` over cumulative sample sizes and fetches only the samples it needs, each
with one ranged read (runs of neighbouring samples of one shard coalesce into one read; all
reads of a block go out in one ``fs.cat_ranges`` call, concurrent for HTTP and S3). Every sample
read is checked for length and CRC-32; errors name the shard and sample and reach the consumer.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from data_pipeline.shards.errors import (
    DataError,
    ShardMissingError,
    ShardTruncatedError,
    SourceUnreachableError,
    VocabMismatchError,
)
from data_pipeline.shards.format import Manifest, ShardInfo, decode_sample, load_manifest, shard_url
from data_pipeline.shards.storage import DEFAULT_RETRY, Retry, filesystem, transient

IGNORE_INDEX = -100
ORDERS = ("corpus", "shuffle")
STATE_VERSION = 1


@dataclass(frozen=True)
class Geometry:
    """Where every global row lies in the epoch's virtual token array."""

    tokens: int
    """N, tokens per epoch."""
    global_rows: int
    """G = world_size x rows_per_rank."""
    tgt_len: int
    """T, time steps per batch."""
    row_stride: int
    """L, distance between the starts of consecutive rows."""
    steps: int
    """Batches per epoch, on every rank."""
    tail: bool
    """Evaluation layout: every pair once, padded at the end."""

    @classmethod
    def of(cls, tokens: int, global_rows: int, tgt_len: int, tail: bool) -> Geometry:
        """Row layout for a split of ``tokens`` tokens."""
        if tail:
            stride = -(-(tokens - 1) // global_rows)
            steps = -(-stride // tgt_len)
        else:
            stride = tokens // global_rows
            steps = max(stride - 1, 0) // tgt_len
        return cls(tokens, global_rows, tgt_len, stride, steps, tail)

    def inputs_in_row(self, row: int) -> int:
        """Input positions of a global row (pairs for ``tail``, whole steps otherwise)."""
        if self.tail:
            return int(np.clip(self.tokens - 1 - row * self.row_stride, 0, self.row_stride))
        return self.steps * self.tgt_len

    def width(self, step: int) -> int:
        """Time steps of batch ``step`` (only the last tail batch can be narrower)."""
        if self.tail:
            return min(self.tgt_len, self.row_stride - step * self.tgt_len)
        return self.tgt_len


class SampleTable:
    """All samples of a split in corpus order, flattened from the manifest."""

    def __init__(self, manifest: Manifest, url: str):
        self.shards: list[ShardInfo] = manifest.shards
        self.urls = [shard_url(url, s) for s in manifest.shards]
        self.shard_of = np.concatenate(
            [np.full(len(s.sample_tokens), i) for i, s in enumerate(self.shards)]
        ).astype(np.int64)
        self.index_in_shard = np.concatenate([np.arange(len(s.sample_tokens)) for s in self.shards])
        self.tokens = np.concatenate([np.asarray(s.sample_tokens, np.int64) for s in self.shards])
        self.continues = np.concatenate(
            [np.asarray(s.sample_continues, np.int64) for s in self.shards]
        ).astype(bool)
        self.vocab_size = manifest.vocab_size

    def __len__(self) -> int:
        return len(self.tokens)

    def cut_ends(self, sample: int) -> tuple[bool, bool]:
        """Whether a sample's first entry continues the sample before and its last entry goes on
        in the sample after (pieces of a cut document)."""
        after = sample + 1 < len(self) and self.continues[sample + 1]
        return bool(self.continues[sample]), bool(after)

    def byte_range(self, sample: int) -> tuple[int, int]:
        """[start, end) of a sample's lengths + tokens in its shard file."""
        return self.shards[self.shard_of[sample]].sample_span(self.index_in_shard[sample])


@dataclass(frozen=True)
class EpochOrder:
    """The order of samples (and of documents in them) in one epoch."""

    epoch: int
    """Epoch number."""
    samples: np.ndarray
    """Sample ids in epoch order."""
    starts: np.ndarray
    """Virtual start of each epoch-order sample, plus N at the end."""
    shuffle_seed: int | None
    """Seed of the document shuffle, None for corpus order."""

    @classmethod
    def of(cls, table: SampleTable, order: str, seed: int, epoch: int) -> EpochOrder:
        """Corpus order, or a permutation seeded by (seed, epoch)."""
        if order == "corpus":
            samples = np.arange(len(table))
        else:
            samples = shuffled_chains(table.continues, np.random.default_rng([seed, epoch]))
        starts = np.concatenate([[0], np.cumsum(table.tokens[samples])])
        return cls(epoch, samples, starts, seed if order == "shuffle" else None)

    def pieces(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(sample id, begin, end) pieces covering virtual tokens [start, stop)."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        for j in range(first, last):
            base = int(self.starts[j])
            yield (
                int(self.samples[j]),
                max(start, base) - base,
                min(stop, self.starts[j + 1]) - base,
            )


def shuffled_chains(continues: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample ids in a random order of chains (runs of samples joined by a cut document), each
    chain's samples in corpus order; without cut documents, ``rng.permutation`` of the samples."""
    heads = np.flatnonzero(~continues)
    sizes = np.diff(np.append(heads, len(continues)))
    perm = rng.permutation(len(heads))
    first, size = heads[perm], sizes[perm]
    return np.repeat(first - np.cumsum(size) + size, size) + np.arange(len(continues))


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


def shuffle_documents(
    tokens: np.ndarray,
    lengths: np.ndarray,
    order: EpochOrder,
    sample: int,
    cut_ends: tuple[bool, bool],
) -> tuple[np.ndarray, np.ndarray]:
    """A sample's tokens and document lengths with its documents permuted for this epoch (as is
    for corpus order); pieces of cut documents (``cut_ends``: first, last) stay where they join
    their neighbours."""
    lo, hi = int(cut_ends[0]), len(lengths) - int(cut_ends[1])
    if order.shuffle_seed is None or hi - lo < 2:
        return tokens, lengths
    rng = np.random.default_rng([order.shuffle_seed, order.epoch, sample])
    perm = np.arange(len(lengths))
    perm[lo:hi] = lo + rng.permutation(hi - lo)
    starts = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)])
    new_lengths = lengths[perm].astype(np.int64)
    new_starts = np.concatenate([[0], np.cumsum(new_lengths[:-1])])
    # Position p of the result, in new document k, is starts[perm[k]] + (p - new_starts[k]).
    gather = np.repeat(starts[perm] - new_starts, new_lengths) + np.arange(len(tokens))
    return tokens[gather], new_lengths


@dataclass
class Block:
    """Consecutive steps of one epoch for this rank's rows, read in one go."""

    epoch: int
    """Epoch of these steps."""
    first_step: int
    """Step number of the block's first batch."""
    tokens: np.ndarray
    """int32 [rows_per_rank, block width + 1]."""
    valid: np.ndarray
    """Input positions of each row that hold real tokens (rest is padding)."""


class Prefetcher:
    """Runs a block iterator in a daemon thread, a bounded queue ahead of the consumer."""

    live: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, blocks: Iterator[Block], depth: int):
        self.queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(blocks,), daemon=True)
        self.thread.name = "txl-data-prefetch"
        Prefetcher.live.add(self)
        self.thread.start()

    def run(self, blocks: Iterator[Block]) -> None:
        """Producer: every block, then None; an exception is handed over instead."""
        try:
            for block in blocks:
                if not self.put(block):
                    return
            self.put(None)
        except BaseException as err:  # handed to the consumer, which re-raises it
            self.put(err)

    def put(self, item) -> bool:
        """Queue an item unless stopped; False once the consumer is gone."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[Block]:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop and join the thread (it notices within 0.1 s)."""
        self.stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=10)


@atexit.register
def _stop_prefetchers() -> None:
    """No prefetch thread outlives the interpreter's shutdown."""
    for prefetcher in list(Prefetcher.live):
        prefetcher.close()


def check_layout(order: str, rank: int, world_size: int, rows_per_rank: int, tgt_len: int):
    """Raise ValueError unless the order is known and the rank and row layout make sense."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    if not 0 <= rank < world_size or rows_per_rank < 1 or tgt_len < 1:
        raise ValueError(
            f"need 0 <= rank < world_size, rows_per_rank >= 1, tgt_len >= 1; got rank={rank}, "
            f"world_size={world_size}, rows_per_rank={rows_per_rank}, tgt_len={tgt_len}"
        )


class BatchStream:
    """What the streams share: batches a Prefetcher (``self.active``, None when idle) reads
    ahead, from data whose vocabulary ``self.manifest`` describes."""

    active: Prefetcher | None = None
    manifest: Manifest

    @property
    def vocab_size(self) -> int:
        """Vocabulary size the token ids refer to."""
        return self.manifest.vocab_size

    def mix_tokens(self) -> dict[str, int] | None:
        """Tokens drawn so far from each corpus of a mix (None: one corpus, no mix)."""
        return None

    def close(self) -> None:
        """Stop background reading (iteration restarts from the saved position)."""
        if self.active is not None:
            self.active.close()
            self.active = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "active", None) is not None:
            self.close()


class TokenStreams(BatchStream):
    """Batches ``(input_ids, targets)``, int64 ``[rows_per_rank, tgt_len]``, for one rank."""

    def __init__(
        self,
        manifest_url: str,
        rows_per_rank: int,
        tgt_len: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        order: str = "corpus",
        *,
        tail: bool = False,
        epochs: int | None = None,
        expected_vocab_size: int | None = None,
        storage_options: dict | None = None,
        retry: Retry = DEFAULT_RETRY,
        prefetch: int = 2,
        block_tokens: int = 1 << 22,
    ):
        check_layout(order, rank, world_size, rows_per_rank, tgt_len)
        self.url, self.rank, self.rows = manifest_url, rank, rows_per_rank
        self.seed, self.order, self.tail, self.epochs = seed, order, tail, epochs
        self.prefetch, self.retry = prefetch, retry
        self.manifest = load_manifest(manifest_url, storage_options, retry)
        if expected_vocab_size is not None:
            self.check_vocab(expected_vocab_size)
        self.fs, _ = filesystem(manifest_url, storage_options, retry)
        self.table = SampleTable(self.manifest, manifest_url)
        self.reader_paths = [filesystem(u, storage_options, retry)[1] for u in self.table.urls]
        self.geometry = Geometry.of(self.manifest.tokens, world_size * rows_per_rank, tgt_len, tail)
        if self.geometry.steps == 0:
            raise DataError(
                f"{manifest_url}: {self.manifest.tokens} tokens are too few for "
                f"{self.geometry.global_rows} rows of {tgt_len}+1 tokens; use fewer rows or "
                f"a shorter tgt_len"
            )
        self.steps_per_block = max(1, block_tokens // (rows_per_rank * tgt_len))
        self.next_epoch, self.next_step = 0, 0
        self.epoch, self.step, self.new_epoch = 0, -1, False

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch (the same on every rank)."""
        return self.geometry.steps

    def check_vocab(self, n_token: int) -> None:
        check_vocab(self.manifest, self.url, n_token)

    def state_dict(self) -> dict:
        """Position of the next batch; O(1) and the same on every rank."""
        return {
            "version": STATE_VERSION,
            "epoch": self.next_epoch,
            "step": self.next_step,
            "seed": self.seed,
            "order": self.order,
            "global_rows": self.geometry.global_rows,
            "tgt_len": self.geometry.tgt_len,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position (seed and order come from the state)."""
        if "kind" in state:  # only a MixedStreams state has one
            raise ValueError(
                f"stream state is of a {state['kind']} of corpora (data.mix), this stream reads "
                "one corpus (data.path); resume a run with the data it was trained on"
            )
        for key in ("global_rows", "tgt_len"):
            if state[key] != getattr(self.geometry, key):
                raise ValueError(
                    f"stream state has {key}={state[key]}, this stream "
                    f"{getattr(self.geometry, key)}; the position only means the same batches "
                    f"with the same global rows (world_size x rows_per_rank) and tgt_len"
                )
        if not 0 <= state["step"] < self.geometry.steps:
            raise ValueError(
                f"stream state step {state['step']} outside [0, {self.geometry.steps})"
            )
        self.close()
        self.seed, self.order = state["seed"], state["order"]
        self.next_epoch, self.next_step = state["epoch"], state["step"]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.close()
        if self.tail:
            self.next_epoch, self.next_step = 0, 0
        self.active = Prefetcher(self.blocks(self.next_epoch, self.next_step), self.prefetch)
        return self.batches(self.active)

    def last_epoch(self) -> int | None:
        """Epoch after which iteration stops (None: never)."""
        return 1 if self.tail else self.epochs

    def blocks(self, epoch: int, step: int) -> Iterator[Block]:
        """Blocks from (epoch, step) on, epoch after epoch (runs in the prefetch thread)."""
        reader = SampleReader(self.table, self.fs, self.reader_paths, self.retry)
        stop = self.last_epoch()
        while stop is None or epoch < stop:
            order = EpochOrder.of(self.table, self.order, self.seed, epoch)
            for first in range(step, self.geometry.steps, self.steps_per_block):
                last = min(first + self.steps_per_block, self.geometry.steps)
                yield self.read_block(reader, order, first, last)
            epoch, step = epoch + 1, 0

    def read_block(self, reader: SampleReader, order: EpochOrder, first: int, last: int) -> Block:
        """Tokens of steps [first, last) for this rank's rows."""
        g, T = self.geometry, self.geometry.tgt_len
        width = sum(g.width(s) for s in range(first, last))
        rows = range(self.rank * self.rows, (self.rank + 1) * self.rows)
        valid = np.array([np.clip(g.inputs_in_row(r) - first * T, 0, width) for r in rows])
        spans = [
            (r * g.row_stride + first * T, r * g.row_stride + first * T + n + 1) if n else (0, 0)
            for r, n in zip(rows, valid)
        ]
        pieces = [list(order.pieces(a, b)) if b > a else [] for a, b in spans]
        samples = reader.load({p[0] for row in pieces for p in row}, order)
        tokens = np.zeros((self.rows, width + 1), np.int32)
        for i, row in enumerate(pieces):
            parts = [samples[s][a:b] for s, a, b in row]
            if parts:
                joined = np.concatenate(parts)
                tokens[i, : len(joined)] = joined
        return Block(order.epoch, first, tokens, valid)

    def batches(self, prefetcher: Prefetcher) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Cut blocks into batches, tracking the position for state_dict()."""
        g = self.geometry
        try:
            for block in prefetcher:
                col = 0
                for step in range(block.first_step, block.first_step + self.block_steps(block)):
                    w = g.width(step)
                    inputs = torch.from_numpy(block.tokens[:, col : col + w].astype(np.int64))
                    targets = torch.from_numpy(
                        block.tokens[:, col + 1 : col + w + 1].astype(np.int64)
                    )
                    if g.tail:
                        pad = torch.from_numpy(col + np.arange(w)[None, :] >= block.valid[:, None])
                        targets[pad] = IGNORE_INDEX
                    col += w
                    self.epoch, self.step, self.new_epoch = block.epoch, step, step == 0
                    last = step + 1 == g.steps
                    self.next_epoch = block.epoch + 1 if last else block.epoch
                    self.next_step = 0 if last else step + 1
                    yield inputs, targets
        finally:
            prefetcher.close()

    def block_steps(self, block: Block) -> int:
        """Number of batches in a block."""
        return min(self.steps_per_block, self.geometry.steps - block.first_step)


def check_vocab(manifest: Manifest, url: str, n_token: int) -> None:
    """Raise VocabMismatchError unless the data's vocabulary has ``n_token`` ids."""
    if manifest.vocab_size != n_token:
        raise VocabMismatchError(
            f"{url}: data has a vocabulary of {manifest.vocab_size} tokens, the model has "
            f'{n_token}; set the model\'s n_token to {manifest.vocab_size} (or "auto") or '
            "prepare the data with the model's vocabulary (--vocab)"
        )
