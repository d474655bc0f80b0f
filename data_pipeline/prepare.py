"""txl-prepare: corpus -> vocabulary + document-contiguous shards + manifests (see shards.py).

    txl-prepare --dataset wikitext-103 --source ../shared/data/wikitext-103 --out DIR
    txl-prepare --dataset lm1b --vocab 1b_word_vocab.txt --out s3://bucket/lm1b --workers 8
    txl-prepare --verify DIR

The vocabulary comes from ``--vocab`` or is built from the train split (from every split
present when there is no train split). Splits missing from the source (e.g. the shared
WikiText-103 copy has no test file) are simply not prepared.

Reruns reuse what is done: a split whose manifest records the same input fingerprint (files,
sizes, modification times, options) and vocabulary, and whose shards are all present, is kept.

Remote ``--out`` / ``--source``: options for fsspec go in ``--out-option KEY=VALUE`` and
``--source-option KEY=VALUE`` (e.g. ``--out-option endpoint_url=http://127.0.0.1:9000``).
s3fs also honours the standard AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``), and fsspec reads ``FSSPEC_S3_ENDPOINT_URL``-style variables at import.

Speed: ``--workers`` processes each read and tokenize ~4 MiB pieces of the files (ends moved to
document boundaries; bytes split + one C-speed dict lookup per token); the main process only
merges ids, counted in order of first appearance, and one vectorised remap then gives the
reference vocabulary order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator

import fsspec
import numpy as np
from tqdm import tqdm

from data_pipeline import corpora
from data_pipeline.corpora import EncodedChunk
from data_pipeline.errors import DataError
from data_pipeline.shards import (
    FORMAT_VERSION,
    Manifest,
    ShardSink,
    load_manifest,
    manifest_url,
    verify,
    vocab_url,
)
from data_pipeline.vocab import Vocab

log = logging.getLogger(__name__)

DEFAULT_SHARD_TOKENS = 1 << 24
DEFAULT_SAMPLE_TOKENS = 1 << 16
PIECE_BYTES = 1 << 22
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "txl-dist")


def prepare(
    dataset: str,
    out: str,
    source: str | None = None,
    *,
    vocab: str | None = None,
    shard_size: int = DEFAULT_SHARD_TOKENS,
    sample_size: int = DEFAULT_SAMPLE_TOKENS,
    workers: int = 1,
    piece_bytes: int = PIECE_BYTES,
    min_count: int | None = None,
    text_docs: str = "block",
    source_checksum: str | None = None,
    cache_dir: str = DEFAULT_CACHE,
    out_options: dict | None = None,
    source_options: dict | None = None,
    progress: bool = True,
) -> dict[str, Manifest]:
    """Prepare ``dataset`` from ``source`` into ``out``; returns each split's manifest.

    ``workers`` processes tokenize pieces of ``piece_bytes`` in parallel; shards hold up to
    ``shard_size`` tokens in samples of up to ``sample_size`` tokens (whole documents, so a
    longer document is a sample of its own). Other arguments are the CLI's options.
    """
    kind = corpora.chunk_kind(dataset, text_docs)
    family = corpora.family(dataset)
    min_count = corpora.DEFAULT_MIN_COUNT[family] if min_count is None else min_count
    root = corpora.resolve_source(dataset, source, cache_dir, source_checksum, source_options)
    files = corpora.split_files(dataset, root, source_options)
    job = Job(
        dataset, kind, out.rstrip("/"), files, shard_size, sample_size, (workers, piece_bytes),
        out_options or {}, source_options or {}, progress,
    )  # fmt: skip
    options = {"min_count": min_count, "vocab": file_identity(vocab, {}) if vocab else None}
    fingerprints = {s: job.fingerprint(s, options) for s in files}
    vocab_splits = ["train"] if "train" in files else list(files)
    manifests: dict[str, Manifest] = {}
    if vocab:
        voc = Vocab.load(vocab, source_options)
    else:
        voc, manifests = job.saved_vocab(vocab_splits, fingerprints)
        if voc is None:
            voc, manifests = job.build_vocab_and_write(
                vocab_splits, fingerprints, corpora.SPECIALS[family], min_count
            )
    job.save_vocab(voc)
    for split in files:
        if split not in manifests:
            manifests[split] = job.reusable(split, fingerprints[split], voc) or job.write_split(
                split, fingerprints[split], voc, job.encode_with_vocab(split, voc)
            )
    return manifests


def file_identity(url: str, storage_options: dict) -> list:
    """What identifies a file's version cheaply: URL, size and modification stamp."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    info = fs.info(path)
    stamp = next((str(info[k]) for k in ("mtime", "ETag", "LastModified") if k in info), "")
    return [url, info.get("size"), stamp]


class Job:
    """One txl-prepare run: where things are, the options, and the per-split steps."""

    def __init__(
        self, dataset, kind, out, files, shard_size, sample_size, parallelism, out_options,
        source_options, progress,
    ):  # fmt: skip
        self.dataset, self.kind, self.out, self.files = dataset, kind, out, files
        self.shard_size, self.sample_size = shard_size, sample_size
        self.workers, self.piece_bytes = parallelism
        self.out_options, self.source_options, self.progress = out_options, source_options, progress
        self.fs, self.out_path = fsspec.core.url_to_fs(out, **out_options)

    def fingerprint(self, split: str, options: dict) -> str:
        """Hash of everything that determines a split's shards, except the vocabulary."""
        spec = {
            "format": FORMAT_VERSION,
            "dataset": self.dataset,
            "kind": self.kind,
            "files": [file_identity(f, self.source_options) for f in self.files[split]],
            "shard_size": self.shard_size,
            "sample_size": self.sample_size,
            **options,
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    def reusable(self, split: str, fingerprint: str, voc: Vocab) -> Manifest | None:
        """The split's existing manifest if it was made from the same inputs and is complete."""
        url = manifest_url(self.out, split)
        if not self.fs.exists(manifest_url(self.out_path, split)):
            return None
        try:
            manifest = load_manifest(url, self.out_options)
        except DataError:
            return None
        if manifest.fingerprint != fingerprint or manifest.vocab_sha256 != voc.sha256:
            return None
        for shard in manifest.shards:
            path = f"{self.out_path}/{split}/{shard.url}"
            if not self.fs.exists(path) or self.fs.size(path) != shard.bytes:
                return None
        log.info("%s: reusing %d prepared shards", url, len(manifest.shards))
        return manifest

    def saved_vocab(
        self, vocab_splits: list[str], fingerprints: dict
    ) -> tuple[Vocab | None, dict[str, Manifest]]:
        """The vocabulary in ``out`` and its splits' manifests, if those splits are reusable."""
        if not self.fs.exists(f"{self.out_path}/vocab.txt"):
            return None, {}
        voc = Vocab.load(vocab_url(self.out), self.out_options)
        done = {s: self.reusable(s, fingerprints[s], voc) for s in vocab_splits}
        return (voc, done) if all(done.values()) else (None, {})

    def save_vocab(self, voc: Vocab) -> None:
        """Write vocab.txt unless the same vocabulary is already there."""
        if (
            self.fs.exists(f"{self.out_path}/vocab.txt")
            and Vocab.load(vocab_url(self.out), self.out_options).sha256 == voc.sha256
        ):
            return
        self.fs.makedirs(self.out_path, exist_ok=True)
        voc.save(vocab_url(self.out), self.out_options)

    def chunks(self, split: str) -> Iterator[EncodedChunk]:
        """Encoded document-aligned pieces of a split, in corpus order, with a progress bar."""
        ranges = [
            (self.kind, *r, self.source_options)
            for f in self.files[split]
            for r in corpora.document_ranges(f, self.kind, self.piece_bytes, self.source_options)
        ]
        total = sum(r[3] - r[2] for r in ranges)
        with tqdm(
            total=total, unit="B", unit_scale=True, desc=f"{self.dataset} {split}",
            disable=not self.progress,
        ) as bar:  # fmt: skip
            for chunk in encode_in_parallel(ranges, self.workers):
                bar.update(chunk.source_bytes)
                yield chunk

    def build_vocab_and_write(
        self, splits: list[str], fingerprints: dict, specials: list[str], min_count: int
    ) -> tuple[Vocab, dict[str, Manifest]]:
        """Encode ``splits`` with provisional ids, build the vocabulary, write the splits."""
        ids = FirstAppearanceIds()
        encoded = {s: [(ids.add(c), c.doc_lengths) for c in self.chunks(s)] for s in splits}
        voc = Vocab.build(ids.words(), ids.counts, specials, min_count)
        remap = voc.lookup_table(ids.words())
        oov = oov_mask(ids.words(), remap, voc)
        manifests = {
            s: self.write_split(
                s, fingerprints[s], voc, ((remap[g], lens, oov[g]) for g, lens in encoded[s])
            )
            for s in splits
        }
        return voc, manifests

    def encode_with_vocab(
        self, split: str, voc: Vocab
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(tokens, document lengths, out-of-vocabulary mask) per piece of a split."""
        for chunk in self.chunks(split):
            table = voc.lookup_table(chunk.words)
            yield table[chunk.ids], chunk.doc_lengths, oov_mask(chunk.words, table, voc)[chunk.ids]

    def write_split(
        self,
        split: str,
        fingerprint: str,
        voc: Vocab,
        pieces: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
    ) -> Manifest:
        """Shards then manifest (written last, so a manifest always means a complete split)."""
        split_dir = f"{self.out_path}/{split}"
        self.fs.makedirs(split_dir, exist_ok=True)
        if self.fs.exists(f"{split_dir}/manifest.json"):
            self.fs.rm_file(f"{split_dir}/manifest.json")
        sink = ShardSink(split_dir, split, self.sample_size, self.shard_size, self.fs)
        oov_tokens = 0
        for tokens, lengths, oov in pieces:
            sink.add(tokens, lengths)
            oov_tokens += int(np.count_nonzero(oov))
        shards = sink.close()
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            dataset=self.dataset,
            split=split,
            vocab_size=len(voc),
            vocab_sha256=voc.sha256,
            tokens=sum(s.tokens for s in shards),
            documents=sum(s.documents for s in shards),
            oov_tokens=oov_tokens,
            fingerprint=fingerprint,
            shards=shards,
        )
        self.fs.pipe_file(f"{split_dir}/manifest.json", manifest.to_json().encode())
        return manifest


class FirstAppearanceIds:
    """Corpus-wide ids in order of first appearance, with counts (before the vocab exists)."""

    def __init__(self):
        self.index: defaultdict[str, int] = defaultdict()
        self.index.default_factory = self.index.__len__
        self.counts = np.zeros(0, np.int64)

    def add(self, chunk: EncodedChunk) -> np.ndarray:
        """Global ids of a chunk's tokens; updates the counts."""
        table = np.fromiter(map(self.index.__getitem__, chunk.words), np.int32, len(chunk.words))
        ids = table[chunk.ids]
        counts = np.bincount(ids, minlength=len(self.index))
        counts[: len(self.counts)] += self.counts
        self.counts = counts
        return ids

    def words(self) -> list[str]:
        """All words seen, in first-appearance order (global id order)."""
        return list(self.index)


def oov_mask(words: list[str], table: np.ndarray, voc: Vocab) -> np.ndarray:
    """True for words the vocabulary maps to its unknown token but that are not that token."""
    if voc.unk is None:
        return np.zeros(len(words), bool)
    unk_id = voc.index[voc.unk]
    return (table == unk_id) & np.array([w != voc.unk for w in words], dtype=bool)


def encode_in_parallel(ranges: list[tuple], workers: int) -> Iterator[EncodedChunk]:
    """corpora.encode_range over ``ranges`` in order, at most 2 per worker in flight."""
    if workers <= 1:
        yield from (corpora.encode_range(*r) for r in ranges)
        return
    # fork: workers only read and tokenize, and start at once, which the throughput needs.
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pending: deque = deque()
        for r in ranges:
            pending.append(pool.apply_async(corpora.encode_range, r))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def parse_options(pairs: list[str]) -> dict:
    """KEY=VALUE strings -> dict (values parsed as JSON when possible, else strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"storage option {pair!r} must be KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def parser() -> argparse.ArgumentParser:
    """The txl-prepare command line."""
    p = argparse.ArgumentParser(prog="txl-prepare", description=__doc__.split("\n")[0])
    p.add_argument("--dataset", choices=corpora.DATASETS)
    p.add_argument(
        "--source", help="directory, file or archive (any fsspec URL); default: official"
    )
    p.add_argument("--out", help="output root (any fsspec URL)")
    p.add_argument("--vocab", help="reuse this vocabulary file (token[ count] per line)")
    p.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_TOKENS, help="tokens/shard")
    p.add_argument("--sample-size", type=int, default=DEFAULT_SAMPLE_TOKENS, help="tokens/sample")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--min-count", type=int, help="vocabulary min count (default per dataset)")
    p.add_argument("--text-docs", choices=("block", "file"), default="block")
    p.add_argument("--source-checksum", help="ALGO:HEX of a --source archive")
    p.add_argument("--cache-dir", default=DEFAULT_CACHE, help="where archives are downloaded")
    p.add_argument("--out-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--verify", metavar="URL", help="re-check a prepared dataset root and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``txl-prepare``; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = parser().parse_args(argv)
    out_options = parse_options(args.out_option)
    try:
        if args.verify:
            for line in verify(args.verify, out_options):
                print(line)
            return 0
        if not (args.dataset and args.out):
            parser().error("--dataset and --out are required (or --verify URL)")
        manifests = prepare(
            args.dataset, args.out, args.source, vocab=args.vocab, shard_size=args.shard_size,
            sample_size=args.sample_size, workers=args.workers, min_count=args.min_count,
            text_docs=args.text_docs, source_checksum=args.source_checksum,
            cache_dir=args.cache_dir, out_options=out_options,
            source_options=parse_options(args.source_option), progress=not args.no_progress,
        )  # fmt: skip
    except DataError as err:
        print(f"txl-prepare: error: {err}", file=sys.stderr)
        return 1
    for split, m in manifests.items():
        print(
            f"{split}: {m.tokens} tokens, {m.documents} documents, {len(m.shards)} shards, "
            f"vocab {m.vocab_size}, {m.oov_tokens} out-of-vocabulary"
            f" -> {manifest_url(args.out, split)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
