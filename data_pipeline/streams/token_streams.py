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

Reading (``reading=Reading(...)``, as a mix's): a background thread reads blocks of about
``block_tokens`` tokens per rank ahead (a bounded queue of ``prefetch`` blocks). For a block it
maps each row's token range to samples with ``np.searchsorted`` over cumulative sample sizes and
fetches only the samples it needs, each with one ranged read (runs of neighbouring samples of one
shard coalesce into one read; all reads of a block go out in one ``fs.cat_ranges`` call,
concurrent for HTTP and S3). Every sample read is checked for length and CRC-32; errors name the
shard and sample and reach the consumer.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from data_pipeline.shards.errors import (
    DataError,
)
from data_pipeline.shards.format import load_manifest
from data_pipeline.shards.storage import filesystem
from data_pipeline.streams.batch_stream import BatchStream, check_vocab
from data_pipeline.streams.geometry import IGNORE_INDEX, Geometry, check_layout
from data_pipeline.streams.order import EpochOrder
from data_pipeline.streams.prefetch import Block, Prefetcher
from data_pipeline.streams.reader import SampleReader
from data_pipeline.streams.reading import DEFAULT_READING, Reading
from data_pipeline.streams.table import SampleTable

STATE_VERSION = 1
BLOCK_TOKENS = 1 << 22
"""Tokens per rank in one block where Reading leaves it open."""


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
        reading: Reading = DEFAULT_READING,
    ):
        check_layout(order, rank, world_size, rows_per_rank, tgt_len)
        self.url, self.rank, self.rows = manifest_url, rank, rows_per_rank
        self.seed, self.order, self.tail, self.epochs = seed, order, tail, epochs
        self.prefetch, self.retry = reading.prefetch, reading.retry
        options, retry = reading.storage_options, reading.retry
        self.manifest = load_manifest(manifest_url, options, retry)
        if expected_vocab_size is not None:
            self.check_vocab(expected_vocab_size)
        self.fs, _ = filesystem(manifest_url, options, retry)
        self.table = SampleTable(self.manifest, manifest_url)
        self.reader_paths = [filesystem(u, options, retry)[1] for u in self.table.urls]
        self.geometry = Geometry.of(self.manifest.tokens, world_size * rows_per_rank, tgt_len, tail)
        if self.geometry.steps == 0:
            raise DataError(
                f"{manifest_url}: {self.manifest.tokens} tokens are too few for "
                f"{self.geometry.global_rows} rows of {tgt_len}+1 tokens; use fewer rows or "
                f"a shorter tgt_len"
            )
        self.steps_per_block = reading.steps_per_block(rows_per_rank, tgt_len, BLOCK_TOKENS)
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
