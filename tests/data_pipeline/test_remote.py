"""Streaming over real loopback servers (HTTP with Range, S3 via moto) equals local streaming."""

from __future__ import annotations

import itertools

import fsspec
import torch

from data_pipeline import Reading, TokenStreams, load_manifest, manifest_url, prepare, verify
from data_pipeline.cli import main

from .conftest import SMALL, wikitext_reference


def first_batches(url: str, **kw) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """300 batches of rank 1 of 2 (crossing shards and an epoch), small read blocks."""
    stream = TokenStreams(url, 3, 128, 1, 2, reading=Reading(block_tokens=4000, **kw))
    return list(itertools.islice(stream, 300))


def assert_same(a, b) -> None:
    assert len(a) == len(b) > 0
    for (x, y), (ex, ey) in zip(a, b):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def test_http_streaming_equals_local_with_ranged_reads(wt103, http_server):
    server = http_server(wt103)
    local = first_batches(manifest_url(str(wt103), "valid"))
    remote = first_batches(manifest_url(server.url, "valid"))
    assert_same(remote, local)
    shard_gets = [r for r in server.requests() if r.startswith("GET /valid/valid-")]
    assert shard_gets and all("bytes=" in r for r in shard_gets)


def test_s3_prepare_stream_and_verify(wt103, shared_data, s3_endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    options = {"endpoint_url": s3_endpoint, "key": "x", "secret": "x"}
    fs = fsspec.filesystem("s3", **options)
    fs.mkdir("txl-test")
    root = "s3://txl-test/wt103"
    prepare("wikitext-103", root, str(shared_data / "wikitext-103"), out_options=options, **SMALL)
    assert fs.exists("txl-test/wt103/valid/valid-00000-000000.tar")
    remote = first_batches(manifest_url(root, "valid"), storage_options=options)
    assert_same(remote, first_batches(manifest_url(str(wt103), "valid")))
    assert len(verify(root, options)) == 2


def test_cli_writes_to_s3_configured_by_environment(
    shared_data, s3_endpoint, monkeypatch, capsys, tmp_path
):
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_ENDPOINT_URL": s3_endpoint}
    fsspec.filesystem("s3", endpoint_url=s3_endpoint, key="x", secret="x").mkdir("txl-cli")
    source = tmp_path / "test.txt"  # WikiText-2's first articles: the store matters, not the size
    with open(shared_data / "wikitext-2" / "test.txt", encoding="utf-8") as f:
        source.write_text("".join(itertools.islice(f, 400)), encoding="utf-8")
    args = ["--dataset", "wikitext-2", "--source", str(source), "--out", "s3://txl-cli/wt2"]
    # txl-prepare's main() with nothing but the environment naming the store, then its --verify
    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    assert main(["--no-progress", *args]) == 0
    assert main(["--no-progress", "--verify", "s3://txl-cli/wt2"]) == 0
    tokens = len(wikitext_reference(source))
    assert f"s3://txl-cli/wt2/test/manifest.json: 1 shards, {tokens} tokens OK" in (
        capsys.readouterr().out
    )


def test_a_rank_reads_only_the_samples_its_rows_need(wt103, http_server):
    server = http_server(wt103)
    stream = TokenStreams(manifest_url(server.url, "valid"), 1, 100, 3, 4, epochs=1)
    assert sum(1 for _ in stream) == stream.steps_per_epoch
    ranges = [r.split("bytes=")[1] for r in server.requests() if ".tar bytes=" in r]
    read = sum(int(b) - int(a) + 1 for a, b in (r.split("-") for r in ranges))
    shards = load_manifest(manifest_url(str(wt103), "valid")).shards
    total = sum(s.bytes for s in shards)
    largest_sample = 4 * max(n for s in shards for n in s.sample_tokens)
    # A quarter of the split, plus at most the sample where the row starts.
    assert total / 4 <= read <= total / 4 + largest_sample
