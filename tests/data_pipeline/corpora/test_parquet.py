"""Parquet files from elsewhere: a row group's text is checked against the cap by its metadata
before it is read and by its values' lengths before any is decoded; a value over the record cap
is named or counted; column names print escaped."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.corpora import parquet

from .test_records import assert_split_is_the_library_encoding, one_line_error, run_prepare


def traced_peak(fn) -> int:
    """The most memory Python allocated while ``fn()`` ran."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def write(path: Path, values: list[str], dictionary: bool, **options) -> None:
    """One text column, dictionary-encoded or plain, compressed by zstd."""
    array = pa.array(values)
    table = pa.table({"text": array.dictionary_encode() if dictionary else array})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", use_dictionary=dictionary, **options)


# A small file of a large text column: 50,000 references to one 4,000-byte value (as a
# dictionary; plain, zstd shrinks the repeats), or a million references to one byte.
BOMBS = {
    "dictionary": (["word " * 800] * 50_000, True, r"decodes to 200000000 bytes of text, over"),
    "plain": (["word " * 800] * 50_000, False, r"holds \d+ bytes of text in 50000 rows, over"),
    "rows": (["a"] * 1_000_000, True, r"holds \d+ bytes of text in 1000000 rows, over"),
}


@pytest.mark.parametrize("bomb", BOMBS)
def test_a_row_group_past_the_cap_is_refused_before_its_text_is_decoded(
    tmp_path, tokenizer_file, monkeypatch, capsys, bomb
):
    monkeypatch.setenv("TXL_MAX_DECOMPRESSED_BYTES", str(5 << 20))
    values, dictionary, shown = BOMBS[bomb]
    write(tmp_path / "src" / "news.parquet", values, dictionary, row_group_size=len(values))
    assert (tmp_path / "src" / "news.parquet").stat().st_size < 1 << 20
    options = ["--dataset", "parquet", "--tokenizer", tokenizer_file, "--skip-bad-records"]
    status = []
    peak = traced_peak(
        lambda: status.append(run_prepare(tmp_path / "src", tmp_path / "out", *options))
    )
    assert status == [2] and peak < 20 << 20, peak  # nothing decoded
    assert re.search(
        rf"news\.parquet: row group 0 {shown} TXL_MAX_DECOMPRESSED_BYTES=5242880\b.*"
        "write it in smaller row groups",
        one_line_error(capsys),
    )


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_value_over_the_record_cap_is_named_or_counted(
    tmp_path, lm1b_sentences, tokenizer_file, monkeypatch, capsys, caplog, dictionary
):
    monkeypatch.setenv("TXL_MAX_RECORD_BYTES", "65536")
    values = lm1b_sentences[:300]
    values[149] = "words " * 40_000
    write(tmp_path / "src" / "news.parquet", values, dictionary, row_group_size=100)
    options = ["--dataset", "parquet", "--tokenizer", tokenizer_file]
    assert run_prepare(tmp_path / "src", tmp_path / "out", *options) == 2
    assert re.search(
        r"news\.parquet: row 150: a record of more than TXL_MAX_RECORD_BYTES=65536 bytes; fix it "
        "or pass --skip-bad-records",
        one_line_error(capsys),
    )
    assert run_prepare(tmp_path / "src", tmp_path / "kept", *options, "--skip-bad-records") == 0
    assert re.search(r"train-\d{5}: left out 1 malformed records", caplog.text)
    kept = lm1b_sentences[:149] + lm1b_sentences[150:300]
    assert_split_is_the_library_encoding(tmp_path / "kept", "train", kept)


@pytest.mark.parametrize(
    "name, escaped",
    [
        ("\x1b]0;owned\x07", r"'\x1b]0;owned\x07'"),  # retitles the terminal
        ("\x1b[2J\x1b[H", r"'\x1b[2J\x1b[H'"),  # clears it
        ("txet\u202e", r"'txet\u202e'"),  # reverses what follows
    ],
)
def test_column_names_are_printed_escaped(tmp_path, tokenizer_file, capsys, name, escaped):
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({name: ["some text"]}), tmp_path / "src" / "news.parquet")
    options = ["--dataset", "parquet", "--tokenizer", tokenizer_file]
    assert run_prepare(tmp_path / "src", tmp_path / "out", *options) == 2
    error = one_line_error(capsys)
    assert f"has no column 'text' (columns: {escaped}); set --text-field" in error
    assert not {"\x1b", "\x07", "\u202e"} & set(error)


@pytest.mark.parametrize(
    "values, shown",
    [
        (pa.array([["some text", "more"], ["text"]]), "'list<element: string>'"),
        (pa.array([{"\x1b[2J": "text"}]), r"'struct<\x1b[2J: string>'"),  # names escaped
        (pa.array([1, 2]), "'int64'"),
    ],
)
def test_a_text_column_without_text_is_one_line(tmp_path, tokenizer_file, capsys, values, shown):
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"text": values}), tmp_path / "src" / "news.parquet")
    options = ["--dataset", "parquet", "--tokenizer", tokenizer_file, "--skip-bad-records"]
    assert run_prepare(tmp_path / "src", tmp_path / "out", *options) == 2
    error = one_line_error(capsys)
    assert f"news.parquet: column 'text' holds {shown}, not text" in error, error
    assert "set --text-field to its text column" in error and "\x1b" not in error


def test_a_plain_row_group_is_read_in_batches_of_bounded_memory(
    tmp_path, lm1b_sentences, monkeypatch
):
    """32 MB of text in one row group, read with batches of 1 MiB: Arrow's memory peaks at a
    few batches, not the group (read whole, it took more than the group)."""
    monkeypatch.setattr(parquet, "BATCH_BYTES", 1 << 20)
    values = [(" ".join(lm1b_sentences[i : i + 40]))[:1000].ljust(1000) for i in range(32_000)]
    path = tmp_path / "news.parquet"
    write(path, values, False, row_group_size=len(values))
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)  # counts what Arrow allocates while reading
    pa.set_memory_pool(pool)
    try:
        with open(path, "rb") as f:
            batches = list(parquet.row_batches(f, "news", "text", 0, 1 << 40))
    finally:
        pa.set_memory_pool(previous)
    assert [text for batch in batches for _, text in batch] == values
    assert pool.max_memory() < 8 << 20, pool.max_memory()
