"""How a stream reads its corpora, the same for one corpus and a mix: storage options, retries,
and the blocks it reads ahead."""

from __future__ import annotations

from dataclasses import dataclass

from data_pipeline.shards.storage import DEFAULT_RETRY, Retry


@dataclass(frozen=True)
class Reading:
    """How the corpora are read: storage, retries, and how far ahead."""

    storage_options: dict | None = None
    """fsspec storage options of the corpora's URLs."""
    retry: Retry = DEFAULT_RETRY
    """Retries of remote reads."""
    prefetch: int = 2
    """Blocks read ahead in the background."""
    block_tokens: int | None = None
    """Tokens per rank read in one block; None: the stream's own (TokenStreams reads arrays, a
    mix walks documents in Python and so reads smaller blocks, to stay a few hundred steps
    ahead)."""

    def steps_per_block(self, rows_per_rank: int, tgt_len: int, own_block_tokens: int) -> int:
        """Steps of `rows_per_rank` rows of `tgt_len` tokens a block holds (at least one);
        `own_block_tokens`: the stream's block size, where `block_tokens` is None."""
        tokens = own_block_tokens if self.block_tokens is None else self.block_tokens
        return max(1, tokens // (rows_per_rank * tgt_len))


DEFAULT_READING = Reading()
