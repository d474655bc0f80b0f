"""Streaming over real loopback servers (HTTP with Range, S3 via moto) equals local streaming."""

from __future__ import annotations

import itertools

import pytest
import torch

from data_pipeline import TokenStreams, manifest_url, prepare, verify

from .conftest import SMALL

s3fs = pytest.importorskip("s3fs")


def first_batches(url: str, **kw) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """300 batches of rank 1 of 2 (crossing shards and an epoch), small read blocks."""
    stream = TokenStreams(url, 3, 128, 1, 2, block_tokens=4000, **kw)
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
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("txl-test")
    root = "s3://txl-test/wt103"
    prepare("wikitext-103", root, str(shared_data / "wikitext-103"), out_options=options, **SMALL)
    assert fs.exists("txl-test/wt103/valid/valid-000000.tar")
    remote = first_batches(manifest_url(root, "valid"), storage_options=options)
    assert_same(remote, first_batches(manifest_url(str(wt103), "valid")))
    assert len(verify(root, options)) == 2
