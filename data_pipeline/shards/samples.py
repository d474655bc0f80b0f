"""A sample's bytes, as one ranged read returns them, decoded and checked: its size, CRC-32,
document lengths and ids, each refusal naming the shard and sample."""

from __future__ import annotations

import zlib

import numpy as np

from data_pipeline.shards.errors import ShardCorruptError, ShardTruncatedError
from data_pipeline.shards.format import ShardInfo


def decode_sample(
    span: bytes, shard: ShardInfo, index: int, url: str, vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, doc lengths) of sample ``index`` from its bytes; checks size, CRC, lengths, ids."""
    start, end = shard.sample_span(index)
    n, expected = shard.sample_tokens[index], end - start
    if len(span) < expected:
        raise ShardTruncatedError(
            f"{url}: sample {index} is truncated ({len(span)} of {expected} bytes read); "
            f"the shard is incomplete, re-run txl-prepare"
        )
    if len(span) > expected:
        raise ShardCorruptError(
            f"{url}: sample {index} read returned {len(span)} bytes, expected {expected}; "
            f"the server ignored the byte range or the shard changed"
        )
    if zlib.crc32(span) != shard.sample_crc32[index]:
        raise ShardCorruptError(
            f"{url}: sample {index} is corrupt (CRC-32 mismatch); re-run txl-prepare"
        )
    lengths = np.frombuffer(span, "<i4", shard.sample_documents[index], 0)
    tokens = np.frombuffer(span, "<i4", n, shard.sample_offsets[index] - start)
    # A CRC is no proof against a crafted shard (it can be recomputed): lengths must add up,
    # and ids outside the vocabulary would index past the embedding or score as 0.
    if len(lengths) and (lengths.min() < 0 or lengths.sum(dtype=np.int64) != n):
        raise ShardCorruptError(
            f"{url}: sample {index}: document lengths do not sum to its {n} tokens"
        )
    if n and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ShardCorruptError(f"{url}: sample {index} holds ids outside [0, {vocab_size})")
    return tokens, lengths
