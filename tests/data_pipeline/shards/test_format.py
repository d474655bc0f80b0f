"""Manifests and shards from someone else's server: names, counts and lengths are checked."""

from __future__ import annotations

import json
import tracemalloc

import fsspec
import numpy as np
import pytest

from data_pipeline import (
    ManifestError,
    ShardCorruptError,
    manifest_url,
    verify,
)
from data_pipeline.prepare.verify import verify_shard
from data_pipeline.shards.errors import ChecksumError, ShardTruncatedError
from data_pipeline.shards.format import load_manifest
from data_pipeline.shards.writer import ShardSink


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


@pytest.mark.parametrize(
    "url", ["/dev/zero", "../train/train-000000.tar", "http://x/a.tar", "", "valid-000000.tar\n"]
)
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
        (lambda s: s["sample_crc32"].__setitem__(0, 2**64), "not a valid manifest.*too large"),
        (lambda s: s["sample_tokens"].__setitem__(0, 2**62), "a count or offset over"),
    ],
    ids=["negative", "lengths", "offset-outside", "shard-sum", "2**64", "2**62"],
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


@pytest.mark.parametrize("change", [512, -512], ids=["larger", "smaller"])
def test_verify_checks_the_size_before_reading_a_byte(wt103_copy, http_server, change):
    name = json.loads((wt103_copy / "train" / "manifest.json").read_text())["shards"][0]["url"]
    path = wt103_copy / "train" / name
    data = path.read_bytes()
    path.write_bytes(data + b"\0" * change if change > 0 else data[:change])
    server = http_server(wt103_copy)
    with pytest.raises(ShardCorruptError) as err:
        verify(server.url)
    assert str(err.value) == (
        f"{server.url}/train/{name}: {len(data) + change} bytes, the manifest says {len(data)}; "
        "re-run txl-prepare"
    )
    assert isinstance(err.value, ShardTruncatedError) == (change < 0)
    assert [r.split()[0] for r in server.requests() if name in r] == ["HEAD"]  # no GET


def test_verify_hashes_a_shard_as_a_stream(tmp_path, http_server):
    """A 16 MiB shard is verified over HTTP holding a few MiB, every sample checked on the way."""
    sink = ShardSink(str(tmp_path), "big", 1 << 16, 1 << 22, fsspec.filesystem("file"))
    tokens = np.random.default_rng(0).integers(0, 1000, 1 << 22, dtype=np.int32)
    sink.add(tokens, np.full(1 << 10, 1 << 12))  # 1024 documents of 4096 tokens
    [shard] = sink.close()
    assert shard.bytes > 16 << 20 and len(shard.sample_tokens) == 64
    url = f"{http_server(tmp_path).url}/{shard.url}"
    verify_shard(url, shard, 1000, None)  # also starts the HTTP client, which is not per shard
    tracemalloc.start()
    verify_shard(url, shard, 1000, None)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < shard.bytes / 3, peak
    path = tmp_path / shard.url
    data = bytearray(path.read_bytes())
    data[shard.sample_offsets[63] + 8] ^= 0xFF  # the last sample
    path.write_bytes(data)
    with pytest.raises(ChecksumError, match="first bad sample: .*sample 63 is corrupt"):
        verify_shard(url, shard, 1000, None)


def test_a_word_manifest_records_no_end_token_and_an_end_token_is_checked(wt103_copy):
    url = manifest_url(str(wt103_copy), "valid")
    raw = json.loads((wt103_copy / "valid" / "manifest.json").read_text())
    assert "eos_token" not in raw and raw["format_version"] == 2  # as before format 3
    manifest = load_manifest(url)
    assert (manifest.eos_token, manifest.eos_id) == (None, None)
    assert "eos_token" not in manifest.to_json()
    edit_manifest(wt103_copy, lambda m: m.update(format_version=3, eos_token="<eos>", eos_id=0))
    assert (load_manifest(url).eos_token, load_manifest(url).eos_id) == ("<eos>", 0)
    assert '"eos_id": 0' in load_manifest(url).to_json()
    for bad in ({"eos_id": raw["vocab_size"]}, {"eos_id": None}, {"format_version": 2}):
        edit_manifest(wt103_copy, lambda m, bad=bad: m.update(bad))
        with pytest.raises(ManifestError, match="eos_token '<eos>' with eos_id .* re-run") as err:
            load_manifest(url)
        one_line_error(err)
        edit_manifest(wt103_copy, lambda m: m.update(format_version=3, eos_id=0))
