"""A sample's bytes decoded and checked: a crafted sample with a valid CRC-32 is still refused."""

from __future__ import annotations

import hashlib
import json
import zlib

import numpy as np
import pytest

from data_pipeline import Reading, ShardCorruptError, TokenStreams, manifest_url, verify
from tests.data_pipeline.shards.test_errors import read_epoch


def rewrite_sample(root, edit) -> None:
    """Change sample 0 of the valid shard and recompute its CRC and the shard's sha256."""
    manifest_path = root / "valid" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    shard = manifest["shards"][0]
    path = root / "valid" / shard["url"]
    data = bytearray(path.read_bytes())
    lo, to = shard["lengths_offsets"][0], shard["sample_offsets"][0]
    n, docs = shard["sample_tokens"][0], shard["sample_documents"][0]
    lengths = np.frombuffer(data, "<i4", docs, lo).copy()
    tokens = np.frombuffer(data, "<i4", n, to).copy()
    edit(lengths, tokens)
    data[lo : lo + 4 * docs] = lengths.astype("<i4").tobytes()
    data[to : to + 4 * n] = tokens.astype("<i4").tobytes()
    shard["sample_crc32"][0] = zlib.crc32(bytes(data[lo : to + 4 * n]))
    shard["sha256"] = hashlib.sha256(data).hexdigest()
    path.write_bytes(data)
    manifest_path.write_text(json.dumps(manifest))


def test_crafted_document_lengths_with_a_valid_crc_are_refused(wt103_copy):
    def huge_lengths(lengths, tokens):
        lengths[0] = 2**31 - 1  # a shuffle would allocate for this many tokens

    rewrite_sample(wt103_copy, huge_lengths)
    with pytest.raises(ShardCorruptError, match="sample 0: document lengths do not sum"):
        verify(str(wt103_copy))
    url = manifest_url(str(wt103_copy), "valid")
    with pytest.raises(ShardCorruptError, match="sample 0: document lengths do not sum"):
        for _ in TokenStreams(
            url, 4, 100, epochs=1, order="shuffle", reading=Reading(block_tokens=3000)
        ):
            pass


def test_streamed_ids_outside_the_vocabulary_are_refused(wt103_copy):
    vocab_size = json.loads((wt103_copy / "valid" / "manifest.json").read_text())["vocab_size"]

    def out_of_range(lengths, tokens):
        tokens[3] = vocab_size + 200

    rewrite_sample(wt103_copy, out_of_range)
    with pytest.raises(ShardCorruptError, match=rf"sample 0 holds ids outside \[0, {vocab_size}\)"):
        read_epoch(wt103_copy)
