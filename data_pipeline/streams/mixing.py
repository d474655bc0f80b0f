"""MixedStreams: training batches from several corpora mixed by weight, every row one stream.

Rows. As in TokenStreams there are G = world_size x rows_per_rank global rows and rank r owns rows
``[r * rows_per_rank, (r + 1) * rows_per_rank)``. Each corpus's epoch (its virtual token array of
N tokens, in corpus or shuffled order exactly as token_streams.py makes it) is cut into G shares of
``N // G`` tokens; row g only ever reads share g of each corpus. A row is a sequence of
documents: at each document boundary its schedule names the corpus of its next document, read
from where its share of that corpus stands, token after token, so consecutive batches
continue every row and no document is broken. The end of a share ends the document there; the
share then starts again in the corpus's next epoch, in that epoch's own order, and the stream logs
one line the first time each corpus starts an epoch.

Schedule (mix_schedule.py, mix_offsets.py). Every row starts as if it had been running for a
while, at a token of a walk of a row's schedule, the rows spread over the walk's runs, mid-way
into a document. Then the rows go on together: where a row's document ends, its next corpus is
the one that keeps the group's deficits (every row's tokens against the weights) smallest over
a document's worth of tokens ahead, with the other rows where they stand, from counts offset by
a start solved on the corpora's sampled lengths for this run: the shares of all rows together
stray from the weights by a fraction of a document, and their expected values are the weights
from the first logged steps. Every rank walks every global row (the others' document ends read
from the samples' length arrays alone), so a row's documents do not depend on the world size.

State. Per row: the corpus of its document and, per corpus, the epoch and offset of its share,
the schedule's count and the tokens skipped at the start; nothing grows with the steps taken.
``state_dict()`` holds every global row (all ranks' rows, gathered over torch.distributed), so
a state saved on one world size resumes on another with the same global rows, batch for batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import torch
import torch.distributed as dist

from data_pipeline.shards.errors import VocabMismatchError
from data_pipeline.shards.format import Manifest, load_manifest
from data_pipeline.streams.batch_stream import BatchStream, check_vocab
from data_pipeline.streams.geometry import check_layout
from data_pipeline.streams.mix_offsets import start_offsets
from data_pipeline.streams.mix_rows import MixRows, RowCursor
from data_pipeline.streams.mix_schedule import MixSchedule
from data_pipeline.streams.mix_state import STATE_KIND, check_mix_state
from data_pipeline.streams.prefetch import Prefetcher
from data_pipeline.streams.reading import DEFAULT_READING, Reading
from data_pipeline.streams.shares import CorpusShares, MixSource

log = logging.getLogger(__name__)

STATE_VERSION = 2
BLOCK_TOKENS = 1 << 16
"""Tokens per rank in one block where Reading leaves it open: a walk over documents in Python
is slower than TokenStreams' array reads, so its blocks are smaller."""


def check_same_vocabulary(names: list[str], manifests: list[Manifest]) -> None:
    """Raise VocabMismatchError, naming two corpora that differ, unless all share one
    vocabulary or tokenizer (same sha256 and size) and one end-of-text token."""
    first = manifests[0]
    for name, manifest in zip(names[1:], manifests[1:]):
        if (manifest.vocab_sha256, manifest.vocab_size) != (first.vocab_sha256, first.vocab_size):
            raise VocabMismatchError(
                f"data.mix: corpora {names[0]} and {name} have different vocabularies "
                f"({first.vocab_size} tokens, sha256 {first.vocab_sha256[:12]} vs "
                f"{manifest.vocab_size}, {manifest.vocab_sha256[:12]}); prepare them with one "
                "tokenizer (txl-prepare --tokenizer FILE, or --vocab FILE)"
            )
        if manifest.eos_token != first.eos_token:
            raise VocabMismatchError(
                f"data.mix: corpora {names[0]} and {name} end documents with different tokens "
                f"({first.eos_token!r} vs {manifest.eos_token!r}); prepare them with one "
                "--eos-token"
            )


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
        reading: Reading = DEFAULT_READING,
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
        self.rank, self.rows, self.world_size = rank, rows_per_rank, world_size
        self.global_rows, self.tgt_len = world_size * rows_per_rank, tgt_len
        self.order, self.prefetch = order, reading.prefetch
        self.corpora = [
            CorpusShares(s, m, self.global_rows, reading, order, seed)
            for s, m in zip(sources, manifests)
        ]
        self.schedule = MixSchedule(
            [s.weight for s in sources],
            [m.tokens / m.documents for m in manifests],
            [c.document_lengths() for c in self.corpora],
        )
        steps_per_block = reading.steps_per_block(rows_per_rank, tgt_len, BLOCK_TOKENS)
        self.walk = MixRows(self.corpora, self.schedule, self.local_rows, tgt_len, steps_per_block)
        self.seed = seed
        starts = self.schedule.starts(seed, self.global_rows)
        self.cursors = [self.walk.start(g, start) for g, start in enumerate(starts)]
        self.walk.offsets[:] = start_offsets(self.schedule, starts, seed, tgt_len)
        self.next_step = 0
        self.epoch, self.step, self.new_epoch = 0, -1, False
        self.announced = [0] * len(sources)  # per corpus, the last epoch logged

    @property
    def shares(self) -> list[int]:
        """Each corpus's share length: tokens per row and epoch."""
        return [c.share for c in self.corpora]

    @property
    def local_rows(self) -> range:
        """Global row numbers of this rank's rows."""
        return range(self.rank * self.rows, (self.rank + 1) * self.rows)

    def row_states(self) -> list[list[int]]:
        """This rank's rows' cursors as lists of ints (the next batch's position)."""
        return [self.cursors[g].to_list() for g in self.local_rows]

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
        """Resume at ``state``'s position (seed and order come from the state), once every
        value of it is checked (StreamStateError naming the key)."""
        check_mix_state(state, self.names, self.shares, self.global_rows, self.tgt_len)
        self.close()
        self.seed, self.order, self.next_step = state["seed"], state["order"], state["step"]
        for corpus in self.corpora:
            corpus.seed, corpus.order, corpus.orders, corpus.samples = (
                state["seed"],
                self.order,
                {},
                {},
            )
        self.cursors = [self.cursor_of(state, g) for g in range(self.global_rows)]
        starts = self.schedule.starts(self.seed, self.global_rows)
        self.walk.offsets[:] = start_offsets(self.schedule, starts, self.seed, self.tgt_len)
        mine = [self.cursors[g] for g in self.local_rows]
        self.announced = [max(c.epochs[i] for c in mine) for i in range(len(self.names))]

    def cursor_of(self, state: dict, row: int) -> RowCursor:
        """Global row ``row``'s cursor in ``state``; a version 1 state (rows drawn by hash:
        the document index, epochs, offsets) goes on in the document each row stands in, then
        by the schedule, counting what the row read."""
        values, k = state["rows"][row], len(self.corpora)
        if state.get("version", 1) >= 2:
            return RowCursor.from_list(values, k)
        document, epochs, offsets = values[0], values[1 : 1 + k], values[1 + k :]
        corpus = self.schedule.corpus_at(state["seed"], row, document)
        counts = [e * share + o for e, o, share in zip(epochs, offsets, self.shares)]
        return RowCursor(corpus, list(epochs), list(offsets), counts, [0] * k)

    def too_short(self, steps: int) -> str | None:
        """A warning when ``steps`` batches are too few for the weights to be realized (None
        when enough): fewer tokens per row than three mean documents of the longest ones."""
        settling, corpus = self.schedule.settling_tokens()
        planned = steps * self.tgt_len
        if planned >= settling:
            return None
        mean = self.schedule.mean_tokens[corpus]
        return (
            f"data.mix: {planned:,} tokens per row planned ({steps} steps x tgt_len "
            f"{self.tgt_len}) are fewer than {settling:,}, three mean documents of corpus "
            f"{self.names[corpus]} ({mean:,.0f} tokens each): the realized shares can stray "
            "from the weights by several points (docs/own-corpora.md); train longer to hold them"
        )

    def mix_tokens(self) -> dict[str, int]:
        """Tokens drawn so far from each corpus by all global rows (a collective, as
        state_dict)."""
        return self.tokens_drawn(all_ranks(self.row_states(), self.world_size))

    def tokens_drawn(self, rows: list[list[int]]) -> dict[str, int]:
        """Tokens the rows with cursors ``rows`` read from each corpus so far."""
        read = [RowCursor.from_list(r, len(self.corpora)).read(self.shares) for r in rows]
        return {name: sum(r[i] for r in read) for i, name in enumerate(self.names)}

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.close()
        start = [c.copy() for c in self.cursors]
        self.active = Prefetcher(self.walk.blocks(start, self.next_step), self.prefetch)
        return self.batches(self.active)

    def announce_epochs(self) -> None:
        """Log once per corpus and epoch, when the first row here gets there, that a corpus
        ran out and starts over (at the batch that reaches it, not when it is read ahead)."""
        for i, name in enumerate(self.names):
            mine = [(g, self.cursors[g]) for g in self.local_rows]
            row, cursor = max(mine, key=lambda rc: rc[1].epochs[i])
            if cursor.epochs[i] > self.announced[i]:
                self.announced[i] = cursor.epochs[i]
                log.info(
                    f"mix: corpus {name} ran out in row {row}; its epoch {cursor.epochs[i]} "
                    "starts, in its own order"
                )

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
