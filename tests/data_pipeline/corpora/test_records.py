"""Record corpora: real text written as JSONL (plain, gzip, zstd) and Parquet becomes shards whose
tokens are exactly what the tokenizers library makes of each document, and decode back to it."""

from __future__ import annotations

import glob
import gzip
import json
import logging
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
import zstandard
from tokenizers import Tokenizer

from data_pipeline.corpora.subword import Subword
from data_pipeline.errors import CorpusFormatError
from data_pipeline.prepare import Job, Settings, prepare
from data_pipeline.shards import load_manifest, manifest_url, verify
from txl_dist.config import resolve_vocab_size

# Small units and pieces, so that even these files span several of each.
LAYOUT = {"sample_size": 5_000, "shard_size": 50_000, "progress": False}
PIECES = {"unit_bytes": 400_000, "piece_bytes": 100_000}


def write_jsonl(path: Path, documents: list[str], field: str = "text") -> None:
    """One ``{field: document}`` per line, compressed as the file name says."""
    text = "".join(json.dumps({field: d, "id": k}) + "\n" for k, d in enumerate(documents))
    data = text.encode("utf-8")
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_parquet(path: Path, documents: list[str], field: str = "text") -> None:
    """The documents as a column of small row groups (many per piece, and pieces without)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": list(range(len(documents))), field: documents})
    pq.write_table(table, path, row_group_size=100)


def split_tokens(root: Path, split: str) -> np.ndarray:
    """Every token of a prepared split, read back with webdataset itself."""
    urls = sorted(glob.glob(str(root / split / "*.tar")))
    samples = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode()
    return np.concatenate([s["tokens.npy"] for s in samples])


def assert_split_is_the_library_encoding(root: Path, split: str, documents: list[str]) -> None:
    """The split's tokens are tokenizer.json's encoding of each document (by the library, not
    our wrapper), one document each, and they decode back to the documents exactly."""
    library = Tokenizer.from_file(str(root / "tokenizer.json"))
    expected = [library.encode(d, add_special_tokens=False).ids for d in documents]
    tokens = split_tokens(root, split)
    assert tokens.tolist() == [i for ids in expected for i in ids]
    manifest = load_manifest(manifest_url(str(root), split))
    assert manifest.documents == len(documents)
    assert manifest.vocab_size == library.get_vocab_size()
    assert library.decode(tokens.tolist(), skip_special_tokens=False) == "".join(documents)


@pytest.fixture
def jsonl_source(tmp_path, wikitext103_articles, lm1b_sentences) -> tuple[Path, dict]:
    """WikiText-103 articles as train (plain, gzip and zstd JSONL files), One Billion Word
    sentences as valid; returns the source and each split's documents."""
    train, valid = wikitext103_articles[:70], lm1b_sentences[:3000]
    third = len(train) // 3
    src = tmp_path / "src"
    write_jsonl(src / "train" / "part-0.jsonl", train[:third])
    write_jsonl(src / "train" / "part-1.jsonl.gz", train[third : 2 * third])
    write_jsonl(src / "train" / "part-2.jsonl.zst", train[2 * third :])
    write_jsonl(src / "valid" / "heldout.jsonl", valid)
    (src / "train" / "README.md").write_text("not a record file: ignored\n")
    return src, {"train": train, "valid": valid}


def test_jsonl_shards_hold_the_tokenizers_encoding_of_each_record(jsonl_source, tmp_path):
    src, documents = jsonl_source
    out = tmp_path / "out"
    # A glob of files at any fsspec URL, split by subdirectory as the text dataset's.
    manifests = prepare(
        "jsonl", str(out), f"file://{src}/*/*.jsonl*", tokenizer="bpe:800", **PIECES, **LAYOUT
    )
    assert list(manifests) == ["train", "valid"]
    assert len(manifests["train"].shards) > 3  # several units and pieces
    tokenizer = Subword.load(str(out / "tokenizer.json"))
    assert tokenizer.sha256 == manifests["train"].vocab_sha256
    auto = resolve_vocab_size({"model": {"n_token": "auto"}, "data": {"path": str(out)}})
    assert auto["model"]["n_token"] == len(tokenizer) == 800
    for split, docs in documents.items():
        assert_split_is_the_library_encoding(out, split, docs)
    assert all(line.endswith("OK") for line in verify(str(out)))


def test_bpe_is_trained_on_a_bounded_sample_the_manifest_states(tmp_path, wikitext103_articles):
    train = wikitext103_articles[:70]
    write_jsonl(tmp_path / "src" / "train" / "articles.jsonl", train)
    size = (tmp_path / "src" / "train" / "articles.jsonl").stat().st_size
    runs = {}
    for budget in (size, size // 4):
        out = tmp_path / f"out-{budget}"
        args = {"tokenizer": "bpe:400", "bpe_sample_bytes": budget, **PIECES, **LAYOUT}
        runs[budget] = prepare("jsonl", str(out), str(tmp_path / "src"), **args)["train"]
        assert_split_is_the_library_encoding(out, "train", train)
    assert runs[size].tokenizer_sample_bytes == size  # a budget the split fits: all of it
    assert 0 < runs[size // 4].tokenizer_sample_bytes <= size // 4
    assert runs[size // 4].vocab_sha256 != runs[size].vocab_sha256


def test_parquet_shards_hold_the_encoding_of_a_given_tokenizer_file(
    tmp_path, wikitext103_articles, lm1b_sentences
):
    train, valid = wikitext103_articles[:70], lm1b_sentences[:3000]
    write_parquet(tmp_path / "src" / "train.parquet", train, field="body")
    write_parquet(tmp_path / "src" / "valid.parquet", valid, field="body")
    given = tmp_path / "given" / "tokenizer.json"
    given.parent.mkdir()
    Subword.train_bpe(500, iter(lm1b_sentences)).save(str(given))
    out = tmp_path / "out"
    prepare(
        "parquet", str(out), str(tmp_path / "src"), tokenizer=f"file://{given}",
        text_field="body", **PIECES, **LAYOUT,
    )  # fmt: skip
    assert (out / "tokenizer.json").read_bytes() == given.read_bytes()
    assert_split_is_the_library_encoding(out, "train", train)
    assert_split_is_the_library_encoding(out, "valid", valid)


def test_parts_and_merges_write_what_one_run_writes(jsonl_source, tmp_path):
    src, _ = jsonl_source
    settings = Settings("jsonl", str(tmp_path / "parts"), str(src), tokenizer="bpe:400", **PIECES)
    job = Job.open(settings)
    for step in range(2):  # train the tokenizer, then encode
        assert "nothing to do" in job.run_part(0, 3) or step == 1
        for part in range(1, 3):
            job.run_part(part, 3)
        assert (job.merge() is None) == (step == 0)
    prepare("jsonl", str(tmp_path / "one"), str(src), tokenizer="bpe:400", **PIECES)
    written = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.*"))
    assert any(p.suffix == ".tar" for p in written)
    for path in written:
        assert (tmp_path / "parts" / path).read_bytes() == (tmp_path / "one" / path).read_bytes()


def bad_source(tmp_path, lm1b_sentences, bad_line: str) -> Path:
    """3000 sentences as JSONL whose line 2500 (far past the first piece) is ``bad_line``."""
    src = tmp_path / "src"
    write_jsonl(src / "train" / "news.jsonl", lm1b_sentences[:3000])
    lines = (src / "train" / "news.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2499] = bad_line + "\n"
    (src / "train" / "news.jsonl").write_text("".join(lines), encoding="utf-8")
    return src


@pytest.mark.parametrize(
    "bad_line, what",
    [
        ('{"text": "cut off', "not a JSON object"),
        ('["text"]', "a JSON list, not an object"),
        ('{"body": "elsewhere"}', "no field 'text'"),
        ('{"text": 3}', "field 'text' is int, not text"),
    ],
)
def test_a_malformed_line_is_named_by_file_and_line(tmp_path, lm1b_sentences, bad_line, what):
    src = bad_source(tmp_path, lm1b_sentences, bad_line)
    with pytest.raises(CorpusFormatError, match=rf"news\.jsonl: line 2500: {what}.*--skip-bad"):
        prepare("jsonl", str(tmp_path / "out"), str(src), tokenizer="bpe:300", **PIECES, **LAYOUT)


def test_skipped_bad_records_are_counted_and_left_out(tmp_path, lm1b_sentences, caplog):
    src = bad_source(tmp_path, lm1b_sentences, '{"text": "cut off')
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        prepare(
            "jsonl", str(out), str(src), tokenizer="bpe:300", skip_bad_records=True, **PIECES,
            **LAYOUT,
        )  # fmt: skip
    assert re.search(r"train-\d{5}: left out 1 malformed records", caplog.text)
    kept = lm1b_sentences[:2499] + lm1b_sentences[2500:3000]
    assert_split_is_the_library_encoding(out, "train", kept)


def test_a_parquet_row_without_text_is_named_by_file_and_row(tmp_path, lm1b_sentences):
    rows = [*lm1b_sentences[:1000]]
    rows[740] = None
    write_parquet(tmp_path / "src" / "news.parquet", rows)
    with pytest.raises(CorpusFormatError, match=r"news\.parquet: row 741: field 'text' is None"):
        prepare("parquet", str(tmp_path / "out"), str(tmp_path / "src"), tokenizer="bpe:300")


def test_a_parquet_file_without_the_text_column_names_its_columns(tmp_path, lm1b_sentences):
    write_parquet(tmp_path / "src" / "news.parquet", lm1b_sentences[:100], field="body")
    with pytest.raises(CorpusFormatError, match=r"has no column 'text' \(columns: id, body\)"):
        prepare("parquet", str(tmp_path / "out"), str(tmp_path / "src"), tokenizer="bpe:300")


@pytest.mark.parametrize(
    "dataset, options, refusal",
    [
        ("jsonl", {}, "--dataset jsonl needs --tokenizer FILE"),
        ("text", {"tokenizer": "bpe:300"}, "--tokenizer applies to the record datasets"),
        ("jsonl", {"tokenizer": "bpe:300", "vocab": "vocab.txt"}, "not both"),
        ("parquet", {"tokenizer": "bpe:12"}, "above the 256 bytes"),
    ],
)
def test_settings_that_do_not_fit_are_refused_before_reading(dataset, options, refusal):
    with pytest.raises(ValueError, match=refusal):
        Settings(dataset, "out", "missing-source", **options)
