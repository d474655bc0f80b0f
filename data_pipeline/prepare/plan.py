"""A job's plan: what one txl-prepare run reads (each split's files cut into units, their input
fingerprints, the splits its vocabulary comes from) and the output root its steps write under;
the pieces of units run through the workers."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import asdict

import fsspec
from tqdm import tqdm

from data_pipeline.corpora import sources
from data_pipeline.corpora.subword import EOS_TOKEN, bpe_size
from data_pipeline.prepare.pieces import Vocabulary, run_pieces
from data_pipeline.prepare.settings import Settings
from data_pipeline.prepare.units import Records, Unit, split_units
from data_pipeline.shards.errors import CorpusFormatError, reading
from data_pipeline.shards.format import FORMAT_VERSION


def file_identity(url: str, storage_options: dict, what: str = "file") -> list:
    """What identifies a file's version cheaply: URL, size and modification stamp."""
    with reading(what, url):
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
        info = fs.info(path)
    stamp = next((str(info[k]) for k in ("mtime", "ETag", "LastModified") if k in info), "")
    return [url, info.get("size"), stamp]


class Plan:
    """What one txl-prepare run reads, and where it writes."""

    def __init__(self, settings: Settings, root: str):
        """The plan of reading the corpus at ``root`` (a directory or file, resolved by
        ``Job.open``)."""
        spec, self.settings = settings.spec, settings
        self.dataset, self.out = settings.dataset, settings.out.rstrip("/")
        self.documents = spec.documents_for(
            settings.text_docs, settings.text_field, settings.skip_bad_records
        )
        self.bpe = bpe_size(settings.tokenizer) if settings.tokenizer else None
        self.min_count = spec.min_count if settings.min_count is None else settings.min_count
        self.out_options, self.source_options = settings.out_options, settings.source_options
        self.source = settings.source or root
        self.files = sources.split_files(spec, root, self.source_options)
        self.fs, self.out_path = fsspec.core.url_to_fs(self.out, **self.out_options)
        self.records = Records(self.fs, self.out_path)
        inputs = self.inputs()
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

    def inputs(self) -> dict:
        """The options every split's fingerprint holds besides its files and layout."""
        settings, vocab = self.settings, self.settings.vocab
        identity = file_identity(vocab, self.source_options, "vocabulary") if vocab else None
        inputs = {"min_count": self.min_count, "vocab": identity, "unit_bytes": settings.unit_bytes}
        if settings.tokenizer:
            inputs["tokenizer"] = self.bpe or file_identity(settings.tokenizer, self.source_options)
            # Each document ends with this token (bpe:N: EOS_TOKEN, trained in).
            inputs["eos"] = EOS_TOKEN if self.bpe else settings.eos_token or "its own"
            if self.bpe:  # which pieces the sample takes follows these two
                inputs["bpe_sample"] = [settings.bpe_sample_bytes, settings.piece_bytes]
            inputs["records"] = asdict(self.documents.tokenization)
        return inputs

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

    def output_undo(self) -> Callable[[], None]:
        """What removes everything written under the output root from now on, if the root is
        absent (with the folders above it made for it) or empty now; else nothing, as it holds
        an earlier run's work (a prepared dataset, or units a rerun goes on from)."""
        fs, path = self.fs, self.out_path
        if fs.exists(path):
            if fs.ls(path, detail=False):
                return lambda: None
            return lambda: [fs.rm(p, recursive=True) for p in fs.ls(path, detail=False)]
        top = path
        while (parent := posixpath.dirname(top)) != top and not fs.exists(parent):
            top = parent
        return lambda: fs.rm(top, recursive=True) if fs.exists(top) else None

    def vocab_units(self) -> list[Unit]:
        """The units of the splits the vocabulary is built from, in corpus order."""
        return [u for u in self.units if u.split in self.vocab_splits]

    def no_text(self, split: str, found: str) -> None:
        """Refuse a split without a single token: training on it could only fail later."""
        raise CorpusFormatError(
            f"source {self.source} holds no text for the {split} split ({found}); point "
            f"--source at the corpus's UTF-8 text files"
        )

    def unit_results(
        self, fn, units: list[Unit], voc: Vocabulary | None = None
    ) -> Iterator[tuple[Unit, Iterator]]:
        """(unit, its pieces' results in order) for each unit; workers run ``fn`` on the
        pieces of all units back to back, so they never wait at a unit's end."""
        tasks = [(u, p) for u in units for p in u.pieces(self.settings.piece_bytes)]
        total = sum(p[2] - p[1] for _, p in tasks)
        # Closed here, not by the garbage collector once zip has stopped reading it: its pool
        # ends in that close, and a Ctrl-C during a collector's close would be ignored.
        pieces = [p for _, p in tasks]
        workers = self.settings.workers
        results = run_pieces(fn, self.documents, pieces, self.source_options, workers, voc)
        with (
            contextlib.closing(results),
            tqdm(
                total=total, unit="B", unit_scale=True, desc=f"{self.dataset} {fn.__name__}",
                disable=None if self.settings.progress else True,
            ) as bar,
        ):  # fmt: skip
            for unit, group in itertools.groupby(zip(tasks, results), key=lambda x: x[0][0]):
                yield unit, counted(bar, (r for _, r in group))


def counted(bar: tqdm, results: Iterator) -> Iterator:
    """Pass results through, advancing the progress bar by their source bytes."""
    for result in results:
        bar.update(result.source_bytes)
        yield result


def digest(value) -> str:
    """sha256 of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
