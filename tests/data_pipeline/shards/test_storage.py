"""Flaky storage: reads over loopback HTTP and S3 servers behind a proxy that fails on purpose."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator

import fsspec
import pytest
import torch

from data_pipeline import (
    Reading,
    SourceUnreachableError,
    TokenStreams,
    load_manifest,
    manifest_url,
)
from data_pipeline.shards.storage import Retry, with_retries
from tests import processes
from tests.conftest import REPO_ROOT

# Fast retries for tests; the defaults wait seconds.
QUICK = Retry(attempts=3, first_wait_s=0.01, max_wait_s=0.05, timeout_s=0.5)
# A stalled read costs its timeout: a shorter one, and an attempt more for a read that is only
# slow on a loaded machine.
STALLS = Retry(attempts=4, first_wait_s=0.01, max_wait_s=0.05, timeout_s=0.2)
BATCHES = 100  # rank 1 of 2, 3 rows of 128, blocks of 10 steps: 10 blocks, each its own reads


def batches(url: str, n: int = BATCHES, **kw) -> list[tuple[torch.Tensor, torch.Tensor]]:
    stream = TokenStreams(url, 3, 128, 1, 2, reading=Reading(block_tokens=4000, prefetch=1, **kw))
    return list(itertools.islice(stream, n))


def assert_same(a, b) -> None:
    assert len(a) == len(b) > 0
    for (x, y), (ex, ey) in zip(a, b):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def test_backoff_doubles_up_to_its_cap_with_jitter():
    retry = Retry(first_wait_s=1, max_wait_s=8)
    for n, backoff in enumerate([1, 2, 4, 8, 8], start=1):
        waits = [retry.wait(n) for _ in range(50)]
        assert backoff / 2 <= min(waits) < max(waits) <= backoff


def test_retry_settings_given_in_storage_options_win():
    mine = {"config_kwargs": {"retries": {"mode": "adaptive", "max_attempts": 2}}}
    options = with_retries("s3://bucket/key", mine, Retry())
    assert options["config_kwargs"]["retries"] == mine["config_kwargs"]["retries"]
    assert options["config_kwargs"]["read_timeout"] == Retry().timeout_s
    assert with_retries("/local/path", mine, Retry()) == mine


@pytest.fixture(scope="module")
def clean(wt103_valid) -> list:
    """Batches of a local read, what every flaky read must give."""
    return batches(wt103_valid)


@pytest.fixture
def s3_valid(wt103, s3_endpoint, monkeypatch) -> tuple[str, dict]:
    """The prepared valid split in a moto bucket: (endpoint, storage options without endpoint)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    fs = fsspec.filesystem("s3", endpoint_url=s3_endpoint, key="x", secret="x")
    if not fs.exists("txl-flaky/wt103/valid/manifest.json"):
        fs.mkdir("txl-flaky")
        fs.put(str(wt103 / "valid"), "txl-flaky/wt103/valid", recursive=True)
    return s3_endpoint, {"key": "x", "secret": "x"}


@pytest.mark.parametrize("how", ["503", "reset", "cut", "stall"])
def test_http_reads_retry_transient_failures(wt103, http_server, flaky_proxy, clean, how):
    proxy = flaky_proxy(http_server(wt103).url, failures=2, how=how)
    retry = STALLS if how == "stall" else QUICK
    assert_same(batches(manifest_url(proxy.url, "valid"), 40, retry=retry), clean[:40])
    outcomes = Counter(proxy.requests())
    reads = [r.removesuffix(" ok") for r in outcomes if r.endswith(" ok")]
    assert "GET /valid/manifest.json bytes=0-" in reads and sum("bytes=" in r for r in reads) >= 3
    assert all(outcomes[f"{r} {how}"] == 2 for r in reads)  # each read failed twice, then passed


def test_s3_reads_retry_with_botocore(s3_valid, flaky_proxy, clean):
    endpoint, options = s3_valid
    proxy = flaky_proxy(endpoint, failures=1, how="503")
    url = "s3://txl-flaky/wt103/valid/manifest.json"
    options = {**options, "endpoint_url": proxy.url}
    assert_same(batches(url, 40, storage_options=options, retry=QUICK), clean[:40])
    assert any(" bytes=" in r and r.endswith("503") for r in proxy.requests())


def test_s3_gives_up_after_the_configured_attempts(s3_valid, flaky_proxy):
    endpoint, options = s3_valid
    proxy = flaky_proxy(endpoint, failures=1000, how="503")
    url = "s3://txl-flaky/wt103/valid/manifest.json"
    with pytest.raises(SourceUnreachableError, match=f"cannot read manifest {url}"):
        load_manifest(url, {**options, "endpoint_url": proxy.url}, QUICK)
    assert len(proxy.requests()) == QUICK.attempts


def read_while_the_server_dies(proxy, url: str, comes_back: bool, **kw) -> tuple[list, int]:
    """Batches of a stream whose server is killed after 20 batches (and started again 0.3 s later),
    and the number of requests the server had seen when it died."""
    stream = iter(
        TokenStreams(url, 3, 128, 1, 2, reading=Reading(block_tokens=4000, prefetch=1, **kw))
    )
    got = list(itertools.islice(stream, 20))
    proxy.kill()
    seen = len(proxy.requests())
    restart = threading.Timer(0.3, proxy.start)
    if comes_back:
        restart.start()
    try:
        return got + list(itertools.islice(stream, BATCHES - 20)), seen
    finally:
        restart.cancel()  # no server starts after the test (the fixture could not stop it)
        if restart.is_alive():
            restart.join()


def behind_a_proxy(store, wt103, http_server, s3_valid, flaky_proxy):
    """A fault proxy in front of the HTTP server or the S3 store: (proxy, manifest URL, options)."""
    if store == "http":
        proxy = flaky_proxy(http_server(wt103).url)
        return proxy, manifest_url(proxy.url, "valid"), {}
    proxy = flaky_proxy(s3_valid[0])
    options = {**s3_valid[1], "endpoint_url": proxy.url}
    return proxy, "s3://txl-flaky/wt103/valid/manifest.json", options


@pytest.mark.parametrize("store", ["http", "s3"])
def test_a_server_that_dies_mid_stream_and_comes_back(
    store, wt103, http_server, s3_valid, flaky_proxy, clean
):
    patient = Retry(attempts=10, first_wait_s=0.1, max_wait_s=0.5, timeout_s=2)  # waits 1.9-3.7 s
    proxy, url, options = behind_a_proxy(store, wt103, http_server, s3_valid, flaky_proxy)
    got, seen = read_while_the_server_dies(proxy, url, True, storage_options=options, retry=patient)
    assert_same(got, clean)
    assert any(" bytes=" in r for r in proxy.requests()[seen:])  # the restarted server's reads


@pytest.mark.parametrize("store", ["http", "s3"])
def test_a_server_that_stays_dead_fails_within_the_budget(
    store, wt103, http_server, s3_valid, flaky_proxy
):
    proxy, url, options = behind_a_proxy(store, wt103, http_server, s3_valid, flaky_proxy)
    start = time.monotonic()
    with pytest.raises(SourceUnreachableError) as err:
        read_while_the_server_dies(proxy, url, False, storage_options=options, retry=QUICK)
    assert time.monotonic() - start < 10
    shard = url.replace("manifest.json", "valid-00000-0000")
    assert str(err.value).startswith(shard) and ": cannot read sample " in str(err.value)
    assert f"still failing after {QUICK.attempts} tries" in str(err.value)


LOCAL_READ = """
import sys
from data_pipeline.shards.storage import Retry, filesystem, with_retries
filesystem(sys.argv[1])
with_retries(sys.argv[1], None, Retry())
print("aiohttp" in sys.modules)
"""


@pytest.fixture(scope="module", autouse=True)
def local_read(tmp_path_factory) -> Iterator[subprocess.Popen]:
    """LOCAL_READ, started as this module starts: its imports take a core the module's reads
    over loopback servers mostly leave idle (its test comes last)."""
    args = [sys.executable, "-c", LOCAL_READ, str(tmp_path_factory.mktemp("local"))]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    with processes.process_group(args, **pipes) as proc:
        yield proc


def test_local_reads_leave_aiohttp_unimported(local_read):
    # Every rank and command reads local files; importing aiohttp took 0.1-0.2 s of each start.
    stdout, stderr = local_read.communicate(timeout=120)
    assert local_read.returncode == 0, stderr[-3000:]
    assert stdout == "False\n"
