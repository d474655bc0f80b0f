"""Manifests and shards from someone else's server: names, counts and lengths are checked."""

from __future__ import annotations

import hashlib
import json
import zlib

import numpy as np
import pytest

from data_pipeline import ManifestError, ShardCorruptError, TokenStreams, manifest_url, verify
from data_pipeline.errors import ShardTruncatedError
from data_pipeline.shards import load_manifest

from .test_errors import read_epoch


def edit_manifest(root, change) -> dict:
    path = root / "valid" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    return manifest


def one_line_error(err) -> str:
    message = str(err.value)
    assert "\n" not in message and "valid/manifest.json" in message
    return message


@pytest.mark.parametrize("url", ["/dev/zero", "../train/train-000000.tar", "http://x/a.tar", ""])
def test_shard_names_must_stay_beside_the_manifest(wt103_copy, url):
    edit_manifest(wt103_copy, lambda m: m["shards"][0].update(url=url))
    with pytest.raises(ManifestError) as err:
        load_manifest(manifest_url(str(wt103_copy), "valid"))
    assert "shard 0: url" in one_line_error(err) and "not a plain file name" in str(err.value)
    with pytest.raises(ManifestError):
        verify(str(wt103_copy))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["sample_tokens"].__setitem__(0, -5), "negative count"),
        (lambda s: s["sample_crc32"].pop(), "per-sample lists differ in length"),
        (lambda s: s["sample_offsets"].__setitem__(1, s["bytes"]), "sample 1: offsets"),
        (lambda s: s.update(tokens=s["tokens"] + 1), "samples hold"),
    ],
    ids=["negative", "lengths", "offset-outside", "shard-sum"],
)
def test_counts_and_offsets_must_add_up(wt103_copy, change, message):
    edit_manifest(wt103_copy, lambda m: change(m["shards"][0]))
    with pytest.raises(ManifestError, match=message) as err:
        load_manifest(manifest_url(str(wt103_copy), "valid"))
    one_line_error(err)


def test_a_manifest_claiming_a_tenth_of_the_tokens_is_refused(wt103_copy):
    edit_manifest(wt103_copy, lambda m: m.update(tokens=m["tokens"] // 10))
    with pytest.raises(ManifestError, match="shards hold .* tokens .* the manifest says"):
        verify(str(wt103_copy))


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
        for _ in TokenStreams(url, 4, 100, epochs=1, order="shuffle", block_tokens=3000):
            pass


def test_streamed_ids_outside_the_vocabulary_are_refused(wt103_copy):
    vocab_size = json.loads((wt103_copy / "valid" / "manifest.json").read_text())["vocab_size"]

    def out_of_range(lengths, tokens):
        tokens[3] = vocab_size + 200

    rewrite_sample(wt103_copy, out_of_range)
    with pytest.raises(ShardCorruptError, match=rf"sample 0 holds ids outside \[0, {vocab_size}\)"):
        read_epoch(wt103_copy)


def test_verify_checks_the_size_before_reading(wt103_copy):
    manifest = edit_manifest(wt103_copy, lambda m: None)
    shard = wt103_copy / "valid" / manifest["shards"][0]["url"]
    with open(shard, "ab") as f:
        f.write(b"\0" * 512)  # longer than the manifest says: the old check let it through
    with pytest.raises(ShardTruncatedError, match="bytes, manifest says"):
        verify(str(wt103_copy))
