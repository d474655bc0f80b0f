"""Fixtures: datasets prepared from ../shared/data, reference tokenizations, loopback servers."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds

from data_pipeline import prepare
from data_pipeline.vocab import Vocab
from tests.processes import process_group

from . import range_server

HERE = Path(__file__).parent
# Small samples and shards so that even the test files span several of each.
SMALL = {"sample_size": 20_000, "shard_size": 100_000, "progress": False}
TITLE = re.compile(r"^ = [^=].*[^=] = $")


def wikitext_reference(path: Path, drop_cut_last_article: bool = False) -> list[str]:
    """Tokens as the Transformer-XL reference code makes them: line.split() + <eos> per line."""
    with open(path, encoding="utf-8") as f:
        lines = list(f)
    if drop_cut_last_article:
        starts = [
            i - 1
            for i in range(1, len(lines) - 1)
            if TITLE.match(lines[i].rstrip("\n")) and lines[i - 1] == " \n" == lines[i + 1]
        ]
        lines = lines[: starts[-1]]
    return [tok for line in lines for tok in line.strip().split() + ["<eos>"]]


def lm1b_reference(path: Path) -> list[str]:
    """Reference lm1b encoding: <S> w1 ... wn <S> per line."""
    with open(path, encoding="utf-8") as f:
        return [tok for line in f for tok in ["<S>", *line.strip().split(), "<S>"]]


def decoded_split(root: Path, split: str) -> tuple[list[str], list[np.ndarray]]:
    """All tokens of a split read back with webdataset itself, and each sample's doc lengths."""
    vocab = Vocab.load(str(root / "vocab.txt"))
    urls = sorted(glob.glob(str(root / split / "*.tar")))
    samples = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode())
    tokens = np.concatenate([s["tokens.npy"] for s in samples])
    return vocab.decode(tokens), [s["lengths.npy"] for s in samples]


@pytest.fixture
def refused_url():
    """An http URL on a loopback port that is bound but never listens: connections are refused.

    The socket stays bound for the test, so no other process can start listening there.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="session")
def wt103(shared_data, tmp_path_factory) -> Path:
    """WikiText-103 train prefix + valid, prepared the way the training engine does it."""
    out = tmp_path_factory.mktemp("wt103")
    prepare("wikitext-103", str(out), str(shared_data / "wikitext-103"), **SMALL)
    return out


@pytest.fixture(scope="session")
def wt103_valid(wt103) -> str:
    """Manifest URL of the WikiText-103 valid split."""
    return str(wt103 / "valid" / "manifest.json")


@pytest.fixture(scope="session")
def lm1b(shared_data, tmp_path_factory) -> Path:
    """The lm1b held-out part1 file, with a vocabulary built from itself (min count 1)."""
    out = tmp_path_factory.mktemp("lm1b")
    source = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    prepare("lm1b", str(out), str(source), min_count=1, **SMALL)
    return out


@pytest.fixture
def wt103_copy(wt103, tmp_path) -> Path:
    """A private copy of the prepared WikiText-103 dataset, for tests that damage it."""
    return Path(shutil.copytree(wt103, tmp_path / "copy"))


def server_process(stack: contextlib.ExitStack, argv: list[str], **popen_kwargs):
    """A loopback server started by ``argv`` (Python), killed when ``stack`` closes; its port."""
    proc = stack.enter_context(
        process_group([sys.executable, *argv], stdout=subprocess.PIPE, text=True, **popen_kwargs)
    )
    return proc, range_server.reported_port(proc)


class RangeServer:
    """A range-capable HTTP server subprocess on loopback, and the requests it saw."""

    def __init__(self, directory: Path, log: Path, stack: contextlib.ExitStack):
        self.log = log
        _, port = server_process(stack, [range_server.__file__, str(directory), str(log)])
        self.url = f"http://127.0.0.1:{port}"

    def requests(self) -> list[str]:
        """Logged ``METHOD PATH RANGE`` lines."""
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def http_server(tmp_path):
    """Start a RangeServer for a directory: ``http_server(directory)``; stopped after the test."""
    with contextlib.ExitStack() as stack:
        count = itertools.count()

        def start(directory: Path) -> RangeServer:
            return RangeServer(directory, tmp_path / f"http{next(count)}.log", stack)

        yield start


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server on loopback (started and stopped by PID); yields its endpoint URL.

    S3 support is an optional extra (s3fs), so only these tests skip without it.
    """
    pytest.importorskip("s3fs", reason="S3 is the optional extra s3: pip install -e '.[dev]'")
    pytest.importorskip("moto", reason="the S3 tests need moto[server]: pip install -e '.[dev]'")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    with contextlib.ExitStack() as stack:
        quiet = {"stderr": subprocess.DEVNULL, "env": env}  # stderr: a log line per request
        _, port = server_process(stack, [str(HERE / "s3_server.py")], **quiet)
        yield f"http://127.0.0.1:{port}"


class FlakyProxy:
    """A flaky_proxy.py subprocess in front of a server: fails requests, dies, comes back."""

    def __init__(
        self, upstream: str, log: Path, failures: int, how: str, stack: contextlib.ExitStack
    ):
        self.argv = [str(HERE / "flaky_proxy.py"), upstream, str(log), str(failures), how]
        self.log, self.port, self.stack = log, 0, stack
        self.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start (again, on the same port once it has one)."""
        self.proc, self.port = server_process(self.stack, [*self.argv, str(self.port)])

    def kill(self) -> None:
        """Die at once, as a crashed server: connections reset, new ones refused."""
        self.proc.kill()
        self.proc.wait(timeout=10)

    def requests(self) -> list[str]:
        """Logged ``METHOD PATH RANGE OUTCOME`` lines."""
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def flaky_proxy(tmp_path):
    """``flaky_proxy(upstream, failures, how)``: a FlakyProxy, killed after the test."""
    with contextlib.ExitStack() as stack:
        count = itertools.count()

        def start(upstream: str, failures: int = 0, how: str = "503") -> FlakyProxy:
            log = tmp_path / f"proxy{next(count)}.log"
            return FlakyProxy(upstream, log, failures, how, stack)

        yield start
