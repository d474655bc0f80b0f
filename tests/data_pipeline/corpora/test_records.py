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
from data_pipeline.prepare.job import Job, prepare
from data_pipeline.prepare.settings import Settings
from data_pipeline.prepare.verify import verify
from data_pipeline.shards.errors import CorpusFormatError, ShardCorruptError, VocabMismatchError
from data_pipeline.shards.format import load_manifest, manifest_url
from txl_dist.config.loading import resolve_vocab_size

# Small units and pieces, so that even these files span several of each.
LAYOUT = {"sample_size": 5_000, "shard_size": 50_000, "progress": False}
PIECES = {"unit_bytes": 200_000, "piece_bytes": 50_000}


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
    return np.concatenate([tokens for tokens, _ in split_samples(root, split)])


def split_samples(root: Path, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every sample of a prepared split (its tokens, its documents' lengths), by webdataset."""
    urls = sorted(glob.glob(str(root / split / "*.tar")))
    samples = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode()
    return [(s["tokens.npy"], s["lengths.npy"]) for s in samples]


def assert_split_is_the_library_encoding(root: Path, split: str, documents: list[str]) -> None:
    """The split's tokens are tokenizer.json's encoding of each document (by the library, not
    our wrapper), one document each, then the end-of-text token the manifest names, and each
    document's tokens but that last one decode back to the document exactly."""
    library = Tokenizer.from_file(str(root / "tokenizer.json"))
    manifest = load_manifest(manifest_url(str(root), split))
    eos = library.token_to_id(manifest.eos_token)
    assert manifest.eos_id == eos is not None and manifest.format_version == 3
    assert manifest.level == "subword"  # a perplexity per subword token, not per word
    expected = [library.encode(d, add_special_tokens=False).ids + [eos] for d in documents]
    samples = split_samples(root, split)
    tokens = np.concatenate([t for t, _ in samples])
    assert tokens.tolist() == [i for ids in expected for i in ids]
    lengths = np.concatenate([n for _, n in samples]).tolist()
    if sum(manifest.shards[0].sample_continues) == 0:  # no document cut: one entry each
        assert lengths == [len(ids) for ids in expected]
    assert manifest.documents == len(documents) and manifest.tokens == len(tokens)
    assert manifest.vocab_size == library.get_vocab_size()
    starts = np.cumsum([0] + [len(ids) for ids in expected]).tolist()
    for k, document in enumerate(documents):
        ids = tokens[starts[k] : starts[k + 1]].tolist()
        assert ids[-1] == eos and library.decode(ids[:-1], skip_special_tokens=False) == document


@pytest.fixture
def jsonl_source(tmp_path, wikitext103_articles, lm1b_sentences) -> tuple[Path, dict]:
    """WikiText-103 articles as train (plain, gzip and zstd JSONL files), One Billion Word
    sentences as valid; returns the source and each split's documents."""
    train, valid = wikitext103_articles[:35], lm1b_sentences[:1500]
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
    train = wikitext103_articles[:35]
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
    train, valid = wikitext103_articles[:35], lm1b_sentences[:1500]
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
    with pytest.raises(CorpusFormatError, match=r"has no column 'text' \(columns: 'id', 'body'\)"):
        prepare("parquet", str(tmp_path / "out"), str(tmp_path / "src"), tokenizer="bpe:300")


@pytest.mark.parametrize(
    "dataset, options, refusal",
    [
        ("jsonl", {}, "--dataset jsonl needs --tokenizer FILE"),
        ("text", {"tokenizer": "bpe:300"}, "--tokenizer applies to the record datasets"),
        ("jsonl", {"tokenizer": "bpe:300", "vocab": "vocab.txt"}, "not both"),
        ("parquet", {"tokenizer": "bpe:12"}, "above the 256 bytes"),
        ("jsonl", {"tokenizer": "bpe:300", "eos_token": "</s>"}, "bpe:N trains its own"),
        ("text", {"eos_token": "</s>"}, "--eos-token names a token of a --tokenizer FILE"),
    ],
)
def test_settings_that_do_not_fit_are_refused_before_reading(dataset, options, refusal):
    with pytest.raises(ValueError, match=refusal):
        Settings(dataset, "out", "missing-source", **options)


def run_prepare(source: Path, out: Path, *options: str) -> int:
    """txl-prepare itself (its main) on a record source: its exit status."""
    from data_pipeline.cli import main

    argv = ["--source", str(source), "--out", str(out), "--workers", "1", "--no-progress"]
    return main([*argv, *options])


def one_line_error(capsys) -> str:
    """txl-prepare's error: one line, no traceback."""
    err = capsys.readouterr().err
    assert err.startswith("txl-prepare: error: ") and err.count("\n") == 1, err
    return err


def with_line(tmp_path: Path, sentences: list[str], line: str, name: str) -> Path:
    """300 sentences as JSONL (compressed as ``name`` says) whose line 150 is ``line``."""
    documents = sentences[:300]
    write_jsonl(tmp_path / "src" / "train" / name, documents)
    path = tmp_path / "src" / "train" / name
    text = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    if name.endswith(".zst"):
        text = zstandard.ZstdDecompressor().decompressobj().decompress(text)
    lines = text.decode("utf-8").splitlines(keepends=True)
    lines[149] = line + "\n"
    write_raw(path, "".join(lines).encode("utf-8"))
    return tmp_path / "src"


def write_raw(path: Path, data: bytes) -> None:
    """``data`` written compressed as the file name says."""
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)


def kept_but_line_150(sentences: list[str]) -> list[str]:
    return sentences[:149] + sentences[150:300]


@pytest.mark.parametrize("skip", [[], ["--skip-bad-records"]], ids=["stop", "skip"])
@pytest.mark.parametrize("name", ["news.jsonl", "news.jsonl.gz"])
def test_a_misnamed_text_field_names_the_fields_the_records_have(
    tmp_path, lm1b_sentences, capsys, skip, name
):
    # Not one record has the field: --skip-bad-records would leave out every one.
    write_jsonl(tmp_path / "src" / "train" / name, lm1b_sentences[:300], field="body")
    options = ["--dataset", "jsonl", "--tokenizer", "bpe:300"]
    out = tmp_path / "out"
    assert run_prepare(tmp_path / "src", out, *options, *skip) == 2
    error = one_line_error(capsys)
    assert (
        f"records in file://{tmp_path / 'src' / 'train' / name} (lines 1-300) have no field "
        "'text' (their fields: 'body', 'id'); pass --text-field NAME\n"
    ) in error
    assert "--skip-bad-records" not in error
    assert not out.exists()
    assert run_prepare(tmp_path / "src", out, *options, *skip, "--text-field", "body") == 0


@pytest.mark.parametrize("before", ["absent", "empty"])
def test_a_refused_run_leaves_the_output_as_it_found_it(tmp_path, lm1b_sentences, capsys, before):
    # The tokenizer and train's shards are written before valid's line 50 stops the run.
    write_jsonl(tmp_path / "src" / "train" / "news.jsonl", lm1b_sentences[:300])
    valid = tmp_path / "src" / "valid" / "news.jsonl"
    write_jsonl(valid, lm1b_sentences[300:400])
    lines = valid.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[49] = '{"text": 3}\n'
    valid.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "runs" / "data" / "own"
    if before == "empty":
        out.mkdir(parents=True)
    assert run_prepare(tmp_path / "src", out, "--dataset", "jsonl", "--tokenizer", "bpe:300") == 2
    assert "valid/news.jsonl: line 50: field 'text' is int, not text" in one_line_error(capsys)
    if before == "absent":  # nor the folders made for it
        assert not (tmp_path / "runs").exists()
    else:
        assert list(out.iterdir()) == []


@pytest.mark.parametrize("name", ["news.jsonl", "news.jsonl.gz", "news.jsonl.zst"])
def test_a_record_over_the_cap_is_named_or_counted_never_held(
    tmp_path, lm1b_sentences, tokenizer_file, monkeypatch, capsys, caplog, name
):
    import tracemalloc

    monkeypatch.setenv("TXL_MAX_RECORD_BYTES", "65536")
    line = json.dumps({"text": "word " * (6 << 20)})  # 30 MiB of ordinary words on one line
    src = with_line(tmp_path, lm1b_sentences, line, name)
    del line
    tokenizer = ["--dataset", "jsonl", "--tokenizer", tokenizer_file]
    assert run_prepare(src, tmp_path / "out", *tokenizer) == 2
    assert re.search(
        rf"{re.escape(name)}: line 150: a record of more than TXL_MAX_RECORD_BYTES=65536 bytes; "
        "fix it or pass --skip-bad-records",
        one_line_error(capsys),
    )
    tracemalloc.start()
    try:
        assert run_prepare(src, tmp_path / "kept", *tokenizer, "--skip-bad-records") == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, peak  # the 30 MiB line was never held
    assert re.search(r"train-\d{5}: left out 1 malformed records", caplog.text)
    assert_split_is_the_library_encoding(
        tmp_path / "kept", "train", kept_but_line_150(lm1b_sentences)
    )


# Runs the library's BPE would take ~170 bytes of memory per byte of (and its trainer minutes).
LONG_RUNS = {
    "letters": "a" * 70_000,
    "CJK letters": "東" * 30_000,
    "digits": "7" * 70_000,
    "symbols": "!" * 70_000,
    "spaces": " x" + "\u3000" * 30_000 + "y",
}


def lowercasing(path: str) -> str:
    """The tokenizer at ``path`` with a lower-casing normalizer: one the library encodes."""
    from tokenizers import normalizers

    tokenizer = Tokenizer.from_file(path)
    tokenizer.normalizer = normalizers.Lowercase()
    return tokenizer.to_str()


@pytest.mark.parametrize("run", LONG_RUNS)
@pytest.mark.parametrize("encoder", ["fast", "library", "bpe"])
def test_a_pre_token_over_the_cap_is_named_or_counted(
    tmp_path, lm1b_sentences, tokenizer_file, capsys, caplog, run, encoder
):
    src = with_line(
        tmp_path, lm1b_sentences, json.dumps({"text": f"Once {LONG_RUNS[run]} more"}), "news.jsonl"
    )
    if encoder == "library":
        (tmp_path / "lower.json").write_text(lowercasing(tokenizer_file))
        tokenizer = str(tmp_path / "lower.json")
    else:
        tokenizer = "bpe:300" if encoder == "bpe" else tokenizer_file
    options = ["--dataset", "jsonl", "--tokenizer", tokenizer]
    assert run_prepare(src, tmp_path / "out", *options) == 2
    assert re.search(
        r"news\.jsonl: line 150: a pre-token \(a run of letters, digits, symbols or spaces\) of "
        r"\d+ bytes, more than TXL_MAX_PRE_TOKEN_BYTES=65536; fix it or pass --skip-bad-records",
        one_line_error(capsys),
    )
    assert run_prepare(src, tmp_path / "kept", *options, "--skip-bad-records") == 0
    assert re.search(r"train-\d{5}: left out 1 malformed records", caplog.text)
    documents = kept_but_line_150(lm1b_sentences)
    if encoder != "library":  # a normalizer: no longer the documents once decoded
        assert_split_is_the_library_encoding(tmp_path / "kept", "train", documents)


@pytest.mark.parametrize("name", ["news.jsonl.gz", "news.jsonl.zst"])
def test_a_compressed_file_decompressing_past_the_cap_is_refused(
    tmp_path, lm1b_sentences, tokenizer_file, monkeypatch, capsys, name
):
    monkeypatch.setenv("TXL_MAX_DECOMPRESSED_BYTES", "1000000")
    src = tmp_path / "src" / "train"
    src.mkdir(parents=True)
    write_raw(
        src / name, b"".join(json.dumps({"text": s}).encode() + b"\n" for s in lm1b_sentences) * 10
    )
    assert (
        run_prepare(
            tmp_path / "src",
            tmp_path / "out",
            "--dataset",
            "jsonl",
            "--tokenizer",
            tokenizer_file,
            "--skip-bad-records",
        )
        == 2
    )
    assert re.search(
        rf"{re.escape(name)} decompresses to more than TXL_MAX_DECOMPRESSED_BYTES=1000000 bytes: "
        "split it into smaller files",
        one_line_error(capsys),
    )


@pytest.mark.parametrize(
    "bad_line, what",
    [
        ('{"text": "a lone \\ud800 surrogate"}', r"its text holds a lone surrogate \('\\ud800'\)"),
        ('{"text": "\\udfff at the start"}', r"its text holds a lone surrogate \('\\udfff'\)"),
        (
            '{"text": "reversed pair \\udc00\\ud800"}',
            r"its text holds a lone surrogate \('\\udc00'\)",
        ),
        ('{"text": "deep", "n": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON nested too deeply"),
        (
            '{"text": "deep", "n": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001,
            "JSON nested too deeply",
        ),
    ],
)
@pytest.mark.parametrize("name", ["news.jsonl", "news.jsonl.gz"])
def test_text_no_tokenizer_takes_is_named_or_counted(
    tmp_path, lm1b_sentences, tokenizer_file, capsys, caplog, bad_line, what, name
):
    src = with_line(tmp_path, lm1b_sentences, bad_line, name)
    options = ["--dataset", "jsonl", "--tokenizer", tokenizer_file]
    assert run_prepare(src, tmp_path / "out", *options) == 2
    assert re.search(
        rf"{re.escape(name)}: line 150: {what}.*--skip-bad-records", one_line_error(capsys)
    )
    assert run_prepare(src, tmp_path / "kept", *options, "--skip-bad-records") == 0
    assert re.search(r"train-\d{5}: left out 1 malformed records", caplog.text)
    assert_split_is_the_library_encoding(
        tmp_path / "kept", "train", kept_but_line_150(lm1b_sentences)
    )


@pytest.mark.parametrize("spec", ["bpe:99999999999999999999", "bpe:2097153", "bpe:٣٠٠", "bpe:²"])
def test_a_bpe_size_that_cannot_be_trained_is_one_line(tmp_path, capsys, spec):
    with pytest.raises(SystemExit) as exit:
        run_prepare(tmp_path / "src", tmp_path / "out", "--dataset", "jsonl", "--tokenizer", spec)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert (
        "N must be a number of tokens above the 256 bytes and at most TXL_MAX_VOCAB_SIZE=2097152"
        in err
    )
    assert "Traceback" not in err


def without_eos(tokenizer_file: str, tmp_path: Path) -> Path:
    """A copy of a tokenizer file with no end-of-text token: GPT-2-style, no added tokens."""
    spec = json.loads(Path(tokenizer_file).read_text())
    (eos,) = spec.pop("added_tokens")
    vocab = spec["model"]["vocab"]
    del vocab[eos["content"]]
    spec["model"]["vocab"] = {t: i - 1 for t, i in vocab.items()}  # ids 0..size-1 again
    path = tmp_path / "no-eos" / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec))
    return path


def test_a_tokenizer_without_an_end_of_text_token_is_refused_saying_how_to_add_one(
    tmp_path, lm1b_sentences, tokenizer_file, capsys
):
    write_jsonl(tmp_path / "src" / "train" / "news.jsonl", lm1b_sentences[:200])
    given = without_eos(tokenizer_file, tmp_path)
    assert run_prepare(tmp_path / "src", tmp_path / "out", "--dataset", "jsonl",
                       "--tokenizer", str(given)) == 2  # fmt: skip
    err = one_line_error(capsys)
    assert f"{given} has no end-of-text token (none of <|endoftext|>, <|end_of_text|>" in err
    assert "name one of its tokens with --eos-token TEXT, or add one to its added_tokens" in err
    assert '{"id": 399, "content": "<|endoftext|>"' in err and '"special": true}' in err
    # --eos-token names one of its tokens instead: each document then ends with it.
    options = ["--dataset", "jsonl", "--tokenizer", str(given), "--eos-token", "\u0120the"]
    assert run_prepare(tmp_path / "src", tmp_path / "named", *options) == 0
    manifest = load_manifest(manifest_url(str(tmp_path / "named"), "train"))
    assert manifest.eos_token == "\u0120the" and manifest.format_version == 3
    assert_split_is_the_library_encoding(tmp_path / "named", "train", lm1b_sentences[:200])
    # A name that is none of its tokens is refused, naming the flag and the file.
    options[-1] = "<|im_end|>"
    assert run_prepare(tmp_path / "src", tmp_path / "other", *options) == 2
    err = one_line_error(capsys)
    assert f"--eos-token '<|im_end|>': {given} has no such token" in err


def test_a_bpe_tokenizer_trained_without_boundaries_is_trained_again(
    tmp_path, lm1b_sentences, tokenizer_file
):
    write_jsonl(tmp_path / "src" / "train" / "news.jsonl", lm1b_sentences[:300])
    out = tmp_path / "out"
    prepare("jsonl", str(out), str(tmp_path / "src"), tokenizer="bpe:400", **PIECES)
    trained = (out / "tokenizer.json").read_text()
    # An earlier run's tokenizer, trained before document boundaries: found, never reused.
    (out / "tokenizer.json").write_text(without_eos(tokenizer_file, tmp_path).read_text())
    manifest = prepare("jsonl", str(out), str(tmp_path / "src"), tokenizer="bpe:400", **PIECES)
    assert (out / "tokenizer.json").read_text() == trained
    assert manifest["train"].eos_token == "<|endoftext|>" and manifest["train"].eos_id == 0
    assert_split_is_the_library_encoding(out, "train", lm1b_sentences[:300])


def test_verify_checks_every_document_ends_with_the_token_its_manifest_names(
    tmp_path, wikitext103_articles
):
    write_jsonl(tmp_path / "src" / "train" / "articles.jsonl", wikitext103_articles[:30])
    out = tmp_path / "out"
    # Small samples and shards: documents cut across samples and across shards.
    layout = {"sample_size": 500, "shard_size": 2000}
    manifest = prepare("jsonl", str(out), str(tmp_path / "src"), tokenizer="bpe:400", **layout)
    shards = manifest["train"].shards
    assert len(shards) > 3 and any(s.sample_continues[0] for s in shards[1:])
    (line,) = verify(str(out))
    assert line.endswith("each document ending with '<|endoftext|>' OK")
    path = out / "train" / "manifest.json"
    raw = json.loads(path.read_text())
    library = Tokenizer.from_file(str(out / "tokenizer.json"))
    raw["eos_id"] = library.token_to_id("\u0120the")  # another token's id: not the tokenizer's
    path.write_text(json.dumps(raw))
    with pytest.raises(VocabMismatchError, match=re.escape("eos_token '<|endoftext|>' is not id")):
        verify(str(out))
    raw["eos_token"] = "\u0120the"  # consistent, but the documents end otherwise
    path.write_text(json.dumps(raw))
    with pytest.raises(
        ShardCorruptError, match=r"\.tar: sample \d+: document \d+ does not end with the end"
    ):
        verify(str(out))
