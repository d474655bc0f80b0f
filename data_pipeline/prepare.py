"""Preparing a dataset: corpus -> vocabulary + document-contiguous shards + manifests (shards/).

``prepare()`` is txl-prepare as a function; ``Job`` holds one run's steps, which txl-prepare's
command line (cli.py) also runs one at a time as cluster jobs (``--part I/N``, ``--merge``).

The vocabulary comes from ``--vocab`` or is built from the train split (from every split
present when there is no train split, or where the dataset says so, as the reference does:
corpora/datasets.py). Splits missing from the source (e.g. the shared WikiText-103 copy has no
test file) are simply not prepared.

Steps (units.py): the files of each split are cut into units of ``--unit-bytes``. Without
``--vocab``, each unit's words are counted first and the vocabulary is built from the counts in
corpus order; then each unit is encoded into its own shards; then each split's manifest joins
its units' shards. Memory so depends on workers, piece, shard and vocabulary size only, never
on the corpus. Parts and merges give byte-identical output to one process. Building the
vocabulary takes two rounds (parts, merge, parts, merge); with ``--vocab`` one. A part skips
units already done, so a failed part is simply run again.

Record datasets (jsonl, parquet) are tokenized by a subword tokenizer instead (``--tokenizer
FILE``, or ``bpe:N`` trained by the first merge on a sample of the train split's documents,
streamed: corpora/subword.py); the root keeps it as tokenizer.json where vocab.txt would be. The
sample is ``--bpe-sample-bytes`` of source, whole pieces spread evenly over the split
(units.evenly_spaced), so the trainer's memory, which grows with the distinct words it counts,
stays flat however large the corpus; every manifest records the sample's size.

Reruns reuse what is done: a split whose manifest records the same input fingerprint (files,
sizes, modification times, options) and vocabulary, and whose shards are all present, is kept.

Speed: ``--workers`` processes each read and tokenize ~4 MiB pieces of the files (ends moved to
document boundaries) and send back only counts per distinct word, or final int32 ids; the main
process merges counts or writes shards. Encoding maps every token straight to its vocabulary id
through a hash table of exact word keys (wordids.WordTable): no sort, no Python object per word.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import posixpath
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import partial

import fsspec
import numpy as np
from tqdm import tqdm

from data_pipeline.corpora import datasets, sources
from data_pipeline.corpora.bytelevel import PreTokenCheck
from data_pipeline.corpora.charlevel import DEFAULT_TEST_CHARS
from data_pipeline.corpora.datasets import Dataset
from data_pipeline.corpora.records import Texts
from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword, bpe_size
from data_pipeline.pieces import count_piece, encode_piece, in_own_process, run_pieces
from data_pipeline.redact import redact_text
from data_pipeline.shards.errors import CorpusFormatError, DataError, ManifestError, reading
from data_pipeline.shards.format import (
    FORMAT_VERSION,
    VOCAB_FILE,
    Manifest,
    ShardInfo,
    load_manifest,
    manifest_url,
)
from data_pipeline.shards.writer import ShardSink
from data_pipeline.units import (
    DEFAULT_UNIT_BYTES,
    Records,
    Unit,
    evenly_spaced,
    part_units,
    split_units,
)
from data_pipeline.vocab import Vocab
from data_pipeline.wordids import split_ids

log = logging.getLogger(__name__)

DEFAULT_SHARD_TOKENS = 1 << 24
DEFAULT_SAMPLE_TOKENS = 1 << 16
DEFAULT_BPE_SAMPLE_BYTES = 1 << 28
PIECE_BYTES = 1 << 22
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "txl-dist")


def prepare(
    dataset: str,
    out: str,
    source: str | None = None,
    *,
    vocab: str | None = None,
    tokenizer: str | None = None,
    text_field: str = "text",
    skip_bad_records: bool = False,
    bpe_sample_bytes: int = DEFAULT_BPE_SAMPLE_BYTES,
    shard_size: int = DEFAULT_SHARD_TOKENS,
    sample_size: int = DEFAULT_SAMPLE_TOKENS,
    unit_bytes: int = DEFAULT_UNIT_BYTES,
    workers: int = 1,
    piece_bytes: int = PIECE_BYTES,
    min_count: int | None = None,
    text_docs: str = "block",
    test_chars: int = DEFAULT_TEST_CHARS,
    source_checksum: str | None = None,
    cache_dir: str = DEFAULT_CACHE,
    out_options: dict | None = None,
    source_options: dict | None = None,
    progress: bool = True,
) -> dict[str, Manifest]:
    """Prepare ``dataset`` from ``source`` into ``out``; returns each split's manifest.

    The arguments are ``Settings``' fields (``Job.run``: the steps).
    """
    settings = Settings(
        dataset, out, source, vocab=vocab, tokenizer=tokenizer, text_field=text_field,
        skip_bad_records=skip_bad_records, bpe_sample_bytes=bpe_sample_bytes,
        shard_size=shard_size, sample_size=sample_size,
        unit_bytes=unit_bytes, workers=workers, piece_bytes=piece_bytes, min_count=min_count,
        text_docs=text_docs, test_chars=test_chars, source_checksum=source_checksum,
        cache_dir=cache_dir, out_options=out_options or {}, source_options=source_options or {},
        progress=progress,
    )  # fmt: skip
    return Job.open(settings).run()


def file_identity(url: str, storage_options: dict, what: str = "file") -> list:
    """What identifies a file's version cheaply: URL, size and modification stamp."""
    with reading(what, url):
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
        info = fs.info(path)
    stamp = next((str(info[k]) for k in ("mtime", "ETag", "LastModified") if k in info), "")
    return [url, info.get("size"), stamp]


@dataclass(frozen=True)
class Settings:
    """One txl-prepare run: what to prepare from where, and how shards and work are laid out."""

    dataset: str
    """Name of the dataset (corpora/datasets.py)."""
    out: str
    """Output root (any fsspec URL)."""
    source: str | None = None
    """Directory, file or archive holding the corpus (any fsspec URL); None: the official one."""
    vocab: str | None = None
    """Vocabulary file to encode with; None: build it from the corpus."""
    tokenizer: str | None = None
    """Record datasets: a tokenizer.json (any fsspec URL) or ``bpe:N`` (train one of N tokens)."""
    text_field: str = "text"
    """Record datasets: the field (JSONL) or column (Parquet) holding a document's text."""
    skip_bad_records: bool = False
    """Record datasets: leave out (and count) malformed records instead of stopping."""
    bpe_sample_bytes: int = DEFAULT_BPE_SAMPLE_BYTES
    """``bpe:N``: source bytes of the train split to train on, whole pieces spread evenly."""
    shard_size: int = DEFAULT_SHARD_TOKENS
    """Most tokens in a shard."""
    sample_size: int = DEFAULT_SAMPLE_TOKENS
    """Most tokens in a sample (whole documents; a longer one is cut into samples)."""
    unit_bytes: int = DEFAULT_UNIT_BYTES
    """Source bytes per unit: the grain of parts and restarts; no shard spans two units."""
    workers: int = 1
    """Processes that tokenize pieces in parallel."""
    piece_bytes: int = PIECE_BYTES
    """Source bytes per worker task."""
    min_count: int | None = None
    """A built vocabulary leaves out tokens seen fewer times; None: the dataset's default."""
    text_docs: str = "block"
    """What a document of the text dataset is: a block between blank lines, or a file."""
    test_chars: int = DEFAULT_TEST_CHARS
    """enwik8 / text8: bytes (characters) of the test split and of the valid split."""
    source_checksum: str | None = None
    """``ALGO:HEX`` a source archive must hash to."""
    cache_dir: str = DEFAULT_CACHE
    """Where archives are downloaded and extracted."""
    out_options: dict = field(default_factory=dict)
    """fsspec storage options of the output root."""
    source_options: dict = field(default_factory=dict)
    """fsspec storage options of the source (and of ``vocab``)."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        check_layout(self.sample_size, self.shard_size)
        self.spec.documents_for(self.text_docs)  # a text_docs with no meaning is refused
        check_tokenization(self.spec, self.tokenizer, self.vocab)
        if self.bpe_sample_bytes < 1:
            raise ValueError(f"--bpe-sample-bytes {self.bpe_sample_bytes} must be at least 1")

    @property
    def spec(self) -> Dataset:
        """The dataset's definition."""
        return datasets.dataset(self.dataset)


def check_tokenization(spec: Dataset, tokenizer: str | None, vocab: str | None) -> None:
    """Refuse a subword tokenizer where a word vocabulary is built, and the reverse."""
    if spec.subword and not tokenizer:
        raise ValueError(
            f"--dataset {spec.name} needs --tokenizer FILE (a tokenizer.json) or bpe:N"
        )
    if tokenizer and not spec.subword:
        names = ", ".join(n for n, d in datasets.DATASETS.items() if d.subword)
        raise ValueError(f"--tokenizer applies to the record datasets ({names}), not {spec.name}")
    if tokenizer and vocab:
        raise ValueError("give --tokenizer or --vocab, not both")
    if tokenizer:
        bpe_size(tokenizer)  # a bpe:N without a usable N is refused


def check_layout(sample_size: int, shard_size: int) -> None:
    """Refuse samples that could not be cut (< 1 token) or would overflow a shard."""
    if not 1 <= sample_size <= shard_size:
        raise ValueError(
            f"--sample-size {sample_size} must be at least 1 and at most --shard-size "
            f"{shard_size} (a shard holds whole samples)"
        )


class Job:
    """One txl-prepare run: its inputs, and the steps of parts and merge."""

    @classmethod
    def open(cls, settings: Settings) -> Job:
        """The job of ``settings``, its source downloaded, checked and extracted first where it
        is an archive (or cut into splits, enwik8 and text8)."""
        root = sources.resolve_source(
            settings.spec, settings.source, settings.cache_dir, settings.source_checksum,
            settings.source_options, settings.test_chars,
        )  # fmt: skip
        return cls(settings, root)

    def __init__(self, settings: Settings, root: str):
        """A job reading the corpus at ``root`` (a directory or file, resolved by ``open``)."""
        spec, self.settings = settings.spec, settings
        self.dataset, self.out = settings.dataset, settings.out.rstrip("/")
        self.documents = spec.documents_for(settings.text_docs)
        if isinstance(self.documents.tokenization, Texts):
            texts = Texts(settings.text_field, settings.skip_bad_records)
            self.documents = replace(self.documents, tokenization=texts)
        self.bpe = bpe_size(settings.tokenizer) if settings.tokenizer else None
        self.vocab_type = Subword if settings.tokenizer else Vocab
        self.vocab_at = f"{self.out}/{TOKENIZER_FILE if settings.tokenizer else VOCAB_FILE}"
        self.specials = list(spec.specials)
        self.min_count = spec.min_count if settings.min_count is None else settings.min_count
        self.vocab_file = settings.vocab
        self.out_options, self.source_options = settings.out_options, settings.source_options
        self.source = settings.source or root
        self.files = sources.split_files(spec, root, self.source_options)
        self.fs, self.out_path = fsspec.core.url_to_fs(self.out, **self.out_options)
        self.vocab_path = f"{self.out_path}/{posixpath.basename(self.vocab_at)}"
        self.records = Records(self.fs, self.out_path)
        self.voc: Vocab | Subword | None = None  # once found or built
        self.saved_vocab: str | None = None  # sha256 of the vocab.txt this job wrote or read
        vocab = self.vocab_file
        identity = file_identity(vocab, self.source_options, "vocabulary") if vocab else None
        inputs = {"min_count": self.min_count, "vocab": identity, "unit_bytes": settings.unit_bytes}
        if settings.tokenizer:
            inputs["tokenizer"] = self.bpe or file_identity(settings.tokenizer, self.source_options)
            if self.bpe:  # which pieces the sample takes follows these two
                inputs["bpe_sample"] = [settings.bpe_sample_bytes, settings.piece_bytes]
            inputs["records"] = asdict(self.documents.tokenization)
        self.fingerprints = {s: self.fingerprint(s, inputs) for s in self.files}
        train_only = "train" in self.files and not spec.vocab_from_all_splits
        self.vocab_splits = ["train"] if train_only else list(self.files)
        self.vocab_fingerprint = digest([self.fingerprints[s] for s in self.vocab_splits])
        self.units = [
            u
            for s, files in self.files.items()
            for u in split_units(s, files, self.documents, settings.unit_bytes, self.source_options)
        ]
        for split, files in self.files.items():
            if not any(u.split == split for u in self.units):
                n = len(files)
                self.no_text(split, f"no document in {n} file{'s' * (n > 1)}" if n else "no files")

    def fingerprint(self, split: str, options: dict) -> str:
        """Hash of everything that determines a split's shards, except the vocabulary."""
        return digest(
            {
                "format": FORMAT_VERSION,
                "dataset": self.dataset,
                "kind": self.documents.kind,
                "files": [file_identity(f, self.source_options) for f in self.files[split]],
                "shard_size": self.settings.shard_size,
                "sample_size": self.settings.sample_size,
                **options,
            }
        )

    # ------------------------------------------------------------ the two steps

    def run(self) -> dict[str, Manifest]:
        """All of it in this process; returns each split's manifest. This is the whole-corpus
        part followed by the merge (twice when the vocabulary is built: count, build, then
        encode, write manifests), exactly what ``--part I/N`` jobs and ``--merge`` do on a
        cluster."""
        self.run_part(0, 1)
        manifests = self.merge()
        if manifests is None:  # the vocabulary was built from the counts: now encode with it
            self.run_part(0, 1)
            manifests = self.merge()
        return manifests

    def run_part(self, part: int, parts: int) -> str:
        """Do part ``part`` (0-based) of ``parts`` of the next step: count the words of its
        units while the vocabulary is still to be built, else encode them into shards. Units
        already done are skipped, so a failed part is simply run again. Returns what it did."""
        voc = self.vocabulary()
        mine = part_units(self.units, part, parts)
        if voc is None and self.bpe:
            return "nothing to do: the merge (--merge) trains the tokenizer first"
        if voc is None:
            todo = [u for u in mine if u.split in self.vocab_splits and not self.counted(u)]
            self.count(todo)
            return f"counted the words of {len(todo)} units ({len(mine) - len(todo)} done before)"
        finished = {s for s in self.files if self.reusable(s, voc)}
        todo = [u for u in mine if u.split not in finished and not self.encoded(u, voc)]
        for split in {u.split for u in todo}:
            self.remove_manifest(split)  # its shards are about to change
        self.encode(todo, voc)
        return f"encoded {len(todo)} units ({len(mine) - len(todo)} done before)"

    def merge(self) -> dict[str, Manifest] | None:
        """Build the vocabulary from every unit's counts (returns None: run the parts again),
        or write vocab.txt and every split's manifest from its units (returns the manifests)."""
        voc = self.vocabulary()
        if voc is None:
            self.build_vocab()
            return None
        self.save_vocab(voc)
        manifests = {s: self.reused(s, voc) or self.write_manifest(s, voc) for s in self.files}
        self.records.remove()
        return manifests

    # ------------------------------------------------------------ vocabulary

    def vocabulary(self) -> Vocab | Subword | None:
        """The vocabulary to encode with, or None while it still has to be built."""
        if self.voc is None:
            self.voc = self.find_vocabulary()
        return self.voc

    def find_vocabulary(self) -> Vocab | Subword | None:
        if self.vocab_file:
            return Vocab.load(self.vocab_file, self.source_options)
        if self.settings.tokenizer and not self.bpe:
            return Subword.load(self.settings.tokenizer, self.source_options)
        if not self.fs.exists(self.vocab_path):
            return None
        voc = self.vocab_type.load(self.vocab_at, self.out_options)
        built = self.records.read("vocab", None, self.vocab_fingerprint)
        if built and built["sha256"] == voc.sha256:
            return voc
        return voc if all(self.reusable(s, voc) for s in self.vocab_splits) else None

    def counted(self, unit: Unit) -> bool:
        return self.records.read("counts", unit, self.fingerprints[unit.split]) is not None

    def count(self, units: list[Unit]) -> None:
        """Count the words of each unit (one record per unit: memory bounded by its types)."""
        for unit, results in self.unit_results(count_piece, units):
            counts = WordCounts()
            for piece in results:
                counts.add(piece.words, piece.counts)
            record = {"fingerprint": self.fingerprints[unit.split], "words": counts.words()}
            self.records.write("counts", unit, {**record, "counts": counts.counts.tolist()})

    def build_vocab(self) -> Vocab | Subword:
        """The vocabulary from the counts of every unit of the vocabulary splits, in order (or
        the BPE tokenizer trained on their documents)."""
        if self.bpe:
            train = partial(Subword.train_bpe, self.bpe, self.vocab_documents())
            trained = in_own_process(train, "the process training the tokenizer")
            return self.remember_vocab(trained)
        counts, missing = WordCounts(), []
        for unit in (u for u in self.units if u.split in self.vocab_splits):
            record = self.records.read("counts", unit, self.fingerprints[unit.split])
            if record is None:
                missing.append(unit)
            else:
                text = " ".join(record["words"]).encode("utf-8")
                counts.add(text, np.asarray(record["counts"], np.int64))
        if missing:
            raise ManifestError(
                f"{self.out}: {describe(missing)} not counted yet; run the parts that hold "
                f"them (txl-prepare ... --part I/N) again, then --merge"
            )
        words = counts.words()
        return self.remember_vocab(Vocab.build(words, counts.counts, self.specials, self.min_count))

    def vocab_documents(self) -> Iterator[str]:
        """The documents of the tokenizer's training sample, streamed in corpus order (but for
        those with a pre-token too long to train on: refused or, skipping bad records, left
        out)."""
        check = PreTokenCheck()
        for piece in self.bpe_sample():
            yield from self.documents.trainable(*piece, self.source_options, check)

    def bpe_sample(self) -> list[tuple[str, int, int, int]]:
        """The pieces of the vocabulary splits a BPE is trained on: --bpe-sample-bytes of
        them, spread evenly (all of them when the splits are smaller)."""
        units = (u for u in self.units if u.split in self.vocab_splits)
        pieces = [p for u in units for p in u.pieces(self.settings.piece_bytes)]
        return evenly_spaced(pieces, self.settings.bpe_sample_bytes)

    def bpe_sample_bytes(self) -> int | None:
        """Source bytes of the BPE's training sample; None when the tokenizer was given."""
        return sum(stop - start for _, start, stop, _ in self.bpe_sample()) if self.bpe else None

    def remember_vocab(self, voc: Vocab | Subword) -> Vocab | Subword:
        """Save a built vocabulary and record which inputs it was built from."""
        self.voc = voc
        self.save_vocab(voc)
        self.records.write(
            "vocab", None, {"fingerprint": self.vocab_fingerprint, "sha256": voc.sha256}
        )
        return voc

    def save_vocab(self, voc: Vocab | Subword) -> None:
        """Write vocab.txt (tokenizer.json) unless the same vocabulary is already there."""
        if self.saved_vocab == voc.sha256:  # this job wrote or read it (spares a reload)
            return
        if not (
            self.fs.exists(self.vocab_path)
            and self.vocab_type.load(self.vocab_at, self.out_options).sha256 == voc.sha256
        ):
            self.fs.makedirs(self.out_path, exist_ok=True)
            voc.save(self.vocab_at, self.out_options)
        self.saved_vocab = voc.sha256

    # ------------------------------------------------------------ shards and manifests

    def encoded(self, unit: Unit, voc: Vocab | Subword) -> dict | None:
        """The unit's record if its shards were written with this vocabulary and are all there."""
        record = self.records.read("unit", unit, self.fingerprints[unit.split])
        if record is None or record["vocab_sha256"] != voc.sha256:
            return None
        shards = [(shard["url"], shard["bytes"]) for shard in record["shards"]]
        return record if self.shards_present(unit.split, shards) else None

    def shards_present(self, split: str, shards: list[tuple[str, int]]) -> bool:
        """Whether every (file name, bytes) shard of `split` is written whole."""
        for url, size in shards:
            path = f"{self.out_path}/{split}/{url}"
            if not self.fs.exists(path) or self.fs.size(path) != size:
                return False
        return True

    def encode(self, units: list[Unit], voc: Vocab | Subword) -> None:
        """Write each unit's shards, then its record."""
        for unit, results in self.unit_results(encode_piece, units, voc):
            split_dir = f"{self.out_path}/{unit.split}"
            self.fs.makedirs(split_dir, exist_ok=True)
            sink = ShardSink(
                split_dir, unit.name, self.settings.sample_size, self.settings.shard_size, self.fs
            )
            oov_tokens = bad_records = 0
            for piece in results:
                sink.add(piece.ids, piece.doc_lengths)
                oov_tokens += piece.oov_tokens
                bad_records += piece.bad_records
            if bad_records:
                log.warning("%s: left out %d malformed records", unit.name, bad_records)
            shards = [asdict(s) for s in sink.close()]
            record = {"fingerprint": self.fingerprints[unit.split], "vocab_sha256": voc.sha256}
            self.records.write("unit", unit, {**record, "oov_tokens": oov_tokens, "shards": shards})

    def write_manifest(self, split: str, voc: Vocab | Subword) -> Manifest:
        """The split's manifest from its units' records (written last: a manifest means a
        complete split); shards no unit lists (from an earlier layout) are removed."""
        units = [u for u in self.units if u.split == split]
        records = {u: self.encoded(u, voc) for u in units}
        missing = [u for u in units if records[u] is None]
        if missing:
            raise ManifestError(
                f"{manifest_url(self.out, split)}: {describe(missing)} not prepared yet; run "
                f"the parts that hold them (txl-prepare ... --part I/N) again, then --merge"
            )
        shards = [ShardInfo(**s) for u in units for s in records[u]["shards"]]
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            dataset=self.dataset,
            split=split,
            vocab_size=len(voc),
            vocab_sha256=voc.sha256,
            tokens=sum(s.tokens for s in shards),
            documents=sum(s.documents for s in shards),
            oov_tokens=sum(r["oov_tokens"] for r in records.values()),
            fingerprint=self.fingerprints[split],
            shards=shards,
            level=self.settings.spec.level,
            tokenizer_sample_bytes=self.bpe_sample_bytes(),
        )
        if manifest.tokens == 0:
            self.no_text(split, "only blank lines")
        split_dir = f"{self.out_path}/{split}"
        listed = {s.url for s in shards}
        for path in self.fs.glob(f"{split_dir}/*.tar"):
            if posixpath.basename(path) not in listed:
                self.fs.rm_file(path)
        self.fs.pipe_file(f"{split_dir}/manifest.json", manifest.to_json().encode())
        return manifest

    def no_text(self, split: str, found: str) -> None:
        """Refuse a split without a single token: training on it could only fail later."""
        raise CorpusFormatError(
            f"source {self.source} holds no text for the {split} split ({found}); point "
            f"--source at the corpus's UTF-8 text files"
        )

    def reusable(self, split: str, voc: Vocab | Subword) -> Manifest | None:
        """The split's existing manifest if it was made from the same inputs and is complete."""
        url = manifest_url(self.out, split)
        if not self.fs.exists(manifest_url(self.out_path, split)):
            return None
        try:
            manifest = load_manifest(url, self.out_options)
        except DataError:
            return None
        if manifest.fingerprint != self.fingerprints[split] or manifest.vocab_sha256 != voc.sha256:
            return None
        shards = [(shard.url, shard.bytes) for shard in manifest.shards]
        return manifest if self.shards_present(split, shards) else None

    def reused(self, split: str, voc: Vocab) -> Manifest | None:
        """reusable(), said once: the other callers only ask, merge() takes the manifest."""
        manifest = self.reusable(split, voc)
        if manifest is not None:
            url = redact_text(manifest_url(self.out, split))
            log.info("%s: reusing %d prepared shards", url, len(manifest.shards))
        return manifest

    def remove_manifest(self, split: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(manifest_url(self.out_path, split))

    # ------------------------------------------------------------ running pieces

    def unit_results(
        self, fn, units: list[Unit], voc: Vocab | Subword | None = None
    ) -> Iterator[tuple[Unit, Iterator]]:
        """(unit, its pieces' results in order) for each unit; workers run ``fn`` on the
        pieces of all units back to back, so they never wait at a unit's end."""
        tasks = [(u, p) for u in units for p in u.pieces(self.settings.piece_bytes)]
        total = sum(p[2] - p[1] for _, p in tasks)
        results = run_pieces(
            fn,
            self.documents,
            [p for _, p in tasks],
            self.source_options,
            self.settings.workers,
            voc,
        )
        with tqdm(
            total=total, unit="B", unit_scale=True, desc=f"{self.dataset} {fn.__name__}",
            disable=not self.settings.progress,
        ) as bar:  # fmt: skip
            for unit, group in itertools.groupby(zip(tasks, results), key=lambda x: x[0][0]):
                yield unit, counted(bar, (r for _, r in group))


class WordCounts:
    """Occurrences per word, words in order of first appearance (memory: one entry per type
    plus a bounded buffer). Words travel as space-separated UTF-8 text; merges are vectorized
    (wordids.split_ids), each over everything so far, so they wait for MERGE_WORDS new words."""

    MERGE_WORDS = 1 << 22

    def __init__(self):
        self.text, self.counts = b"", np.zeros(0, np.int64)  # merged: distinct words
        self.pending: list[tuple[bytes, np.ndarray]] = []
        self.pending_words = 0

    def add(self, text: bytes, counts: np.ndarray) -> None:
        """Add the counts of the distinct words in ``text`` (space-separated)."""
        self.pending.append((text, counts))
        self.pending_words += len(counts)
        if self.pending_words >= self.MERGE_WORDS:
            self.merge()

    def merge(self) -> None:
        if not self.pending:
            return
        words, ids = split_ids(b" ".join([self.text, *(t for t, _ in self.pending)]))
        weights = np.concatenate([self.counts, *(c for _, c in self.pending)])
        # float64 sums are exact below 2**53 occurrences
        self.counts = np.bincount(ids, weights, len(words)).astype(np.int64)
        self.text, self.pending, self.pending_words = b" ".join(words), [], 0

    def words(self) -> list[str]:
        """All words seen, in first-appearance order (counts: self.counts after this call)."""
        self.merge()
        return self.text.decode("utf-8").split(" ") if self.text else []


def counted(bar: tqdm, results: Iterator) -> Iterator:
    """Pass results through, advancing the progress bar by their source bytes."""
    for result in results:
        bar.update(result.source_bytes)
        yield result


def digest(value) -> str:
    """sha256 of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def describe(units: list[Unit]) -> str:
    """``units train-00003, train-00007 are`` (the first few), for error messages."""
    names = ", ".join(u.name for u in units[:5]) + (", ..." if len(units) > 5 else "")
    return f"unit{'s' if len(units) > 1 else ''} {names} {'are' if len(units) > 1 else 'is'}"
