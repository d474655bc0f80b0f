"""Benchmark of the data pipeline: txl-prepare throughput and per-rank streaming throughput.

    python bench/pipeline.py [--shared ../shared/data] [--mb 100] [--workers 2]

1. Builds a ~100 MB WikiText-format corpus (the WikiText-103 train prefix without its cut last
   article, repeated) and times ``prepare`` on it (tokens/s; target >= 5M on 2 cores).
2. Streams one rank of the prepared train split for a fixed number of batches, from local
   shards and over loopback HTTP (the range-capable test server in a subprocess), and reports
   tokens/s (target >= 20M per rank).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import fsspec

from data_pipeline import TokenStreams, manifest_url, prepare
from data_pipeline.corpora.datasets import DATASETS

REPO = Path(__file__).resolve().parents[1]
RANGE_SERVER = REPO / "tests" / "data_pipeline" / "range_server.py"
sys.path.insert(0, str(RANGE_SERVER.parent))
from range_server import start as start_range_server  # noqa: E402


def build_corpus(shared: Path, target_mb: int, out_dir: Path) -> Path:
    """wiki.train.tokens of about ``target_mb`` MB made of whole articles of the train prefix."""
    prefix = shared / "wikitext-103" / "wiki.train.tokens"
    fs, path = fsspec.core.url_to_fs(str(prefix))
    articles = prefix.read_bytes()[
        : DATASETS["wikitext-103"].documents.usable_end(fs, path, str(prefix))
    ]
    copies = max(1, round(target_mb * 1e6 / len(articles)))
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = out_dir / "wiki.train.tokens"
    corpus.write_bytes(articles * copies)
    return corpus


def time_prepare(source: Path, out: Path, workers: int) -> tuple[float, int, float]:
    """(seconds, tokens, MB) of one prepare run."""
    start = time.perf_counter()
    manifests = prepare("wikitext-103", str(out), str(source), workers=workers, progress=False)
    seconds = time.perf_counter() - start
    return (
        seconds,
        manifests["train"].tokens,
        source.joinpath("wiki.train.tokens").stat().st_size / 1e6,
    )


def time_stream(url: str, rows: int, tgt_len: int, batches: int) -> float:
    """Tokens/s of one rank yielding ``batches`` batches (after one warm-up batch)."""
    stream = TokenStreams(url, rows, tgt_len, rank=0, world_size=8)
    it = iter(stream)
    next(it)
    start = time.perf_counter()
    tokens = sum(x.numel() for x, _ in itertools.islice(it, batches))
    rate = tokens / (time.perf_counter() - start)
    stream.close()
    return rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--mb", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows", type=int, default=32, help="rows per rank")
    p.add_argument("--tgt-len", type=int, default=192)
    p.add_argument("--batches", type=int, default=2000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = build_corpus(args.shared, args.mb, tmp / "src")
        seconds, tokens, mb = time_prepare(corpus.parent, tmp / "out", args.workers)
        print(
            f"prepare: {mb:.0f} MB, {tokens / 1e6:.1f}M tokens in {seconds:.2f} s = "
            f"{tokens / seconds / 1e6:.2f}M tokens/s ({args.workers} workers)"
        )
        local = time_stream(
            manifest_url(str(tmp / "out"), "train"), args.rows, args.tgt_len, args.batches
        )
        print(f"stream local: {local / 1e6:.1f}M tokens/s per rank "
              f"({args.rows} rows x {args.tgt_len})")  # fmt: skip
        server, url = start_range_server(str(tmp / "out"), "/dev/null")
        try:
            remote = time_stream(
                manifest_url(url, "train"),
                args.rows,
                args.tgt_len,
                args.batches,
            )
            print(f"stream http: {remote / 1e6:.1f}M tokens/s per rank")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
