"""The registry: every dataset prepares a source of its own, so a new entry is tested as it is
added; entries that share a fingerprint name share their documents."""

from __future__ import annotations

import hashlib
import re

import pytest

from data_pipeline.cli import parser
from data_pipeline.corpora.datasets import DATASETS, Dataset
from data_pipeline.corpora.subword import Subword
from data_pipeline.prepare.job import prepare
from data_pipeline.shards.format import load_manifest, manifest_url
from data_pipeline.vocab import Vocab

from ..conftest import SMALL
from .test_records import write_jsonl, write_parquet

RECORD_WRITERS = {"jsonl": write_jsonl, "parquet": write_parquet}
TEST_CHARS = 20_000  # a character-level source is cut into train, 20,000 valid, 20,000 test


def sample_source(spec: Dataset, shared_data, tmp_path) -> str:
    """One file of real text the dataset reads: WikiText-2 lines for word-level data (as records
    for record datasets), and for character-level data their letters and spaces (what text8
    holds, and bytes to enwik8)."""
    text = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    path = tmp_path / "corpus"
    if spec.name in RECORD_WRITERS:
        path = tmp_path / f"corpus.{spec.name}"
        RECORD_WRITERS[spec.name](path, text.splitlines(keepends=True))
    elif spec.cut_by_position:
        path.write_bytes(re.sub(r"[^a-z]+", " ", text.lower()).strip().encode("ascii"))
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", DATASETS)
def test_every_dataset_prepares_a_source_of_its_own(name, shared_data, tmp_path):
    spec = DATASETS[name]
    source = sample_source(spec, shared_data, tmp_path)
    out = tmp_path / "out"
    tokenizer = "bpe:300" if spec.subword else None
    manifests = prepare(name, str(out), source, tokenizer=tokenizer, test_chars=TEST_CHARS, **SMALL)
    splits = ["train", "valid", "test"] if spec.cut_by_position else ["train"]
    assert list(manifests) == splits
    vocab = Subword.load(str(out / "tokenizer.json")) if spec.subword else None
    vocab = vocab or Vocab.load(str(out / "vocab.txt"))
    assert vocab.sha256 == manifests["train"].vocab_sha256
    assert spec.subword or vocab.tokens[: len(spec.specials)] == list(spec.specials)
    for split in splits:
        manifest = load_manifest(manifest_url(str(out), split))
        assert manifest.dataset == name and manifest.tokens > 0 and manifest.documents > 0
        # Characters (text8) or bytes (enwik8) stay far below WikiText-2's word types.
        level = "char" if len(vocab) <= 256 else "subword" if spec.subword else "word"
        assert manifest.level == level


def test_the_command_line_offers_every_dataset():
    dataset = next(a for a in parser()._actions if a.dest == "dataset")
    assert list(dataset.choices) == list(DATASETS)


def test_documents_that_share_a_kind_are_the_same():
    # A split's fingerprint records its documents' kind: one kind must mean one way to read.
    seen = {}
    for spec in DATASETS.values():
        for documents in filter(None, (spec.documents, spec.file_documents)):
            assert seen.setdefault(documents.kind, documents) == documents, documents.kind


@pytest.mark.parametrize("name", [n for n, d in DATASETS.items() if d.official])
def test_every_official_download_is_checked(name):
    official = DATASETS[name].official
    if official.algorithm is None:
        assert official.size > 0  # nothing published but the size: the size is checked
    else:
        assert len(official.digest) == hashlib.new(official.algorithm).digest_size * 2
