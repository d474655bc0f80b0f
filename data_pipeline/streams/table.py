"""A split's samples in corpus order, flattened from its manifest: sizes, shards, byte ranges."""

from __future__ import annotations

import numpy as np

from data_pipeline.shards.format import Manifest, ShardInfo, shard_url


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
