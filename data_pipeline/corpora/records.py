"""Record corpora: JSONL and Parquet files whose records are documents, tokenized by a subword
tokenizer (subword.py).

* JSONL (``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst``): one JSON object per line, its
  ``--text-field`` the document. A plain file is cut into pieces at line starts like any text
  file; a compressed one cannot be entered in the middle, so it is one piece, read as a stream
  (keep such files to a few hundred MB each: a piece's ids are held until its unit is written).
* Parquet (``*.parquet``): a row group belongs to the piece its first byte falls in, and pieces
  read only their row groups' text column, one row group at a time.

A record that is not an object with a string text field is an error naming the file and line
(or row); with ``--skip-bad-records`` it is left out and counted (the count is logged per unit).
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import fsspec
import numpy as np

from data_pipeline.corpora.boundaries import boundary_at_or_after, next_line, read_range
from data_pipeline.corpora.encoding import Documents, EncodedChunk
from data_pipeline.corpora.splits import TextFiles
from data_pipeline.corpora.subword import Subword
from data_pipeline.errors import CorpusFormatError, reading
from data_pipeline.vocab import Vocab

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
PARQUET_SUFFIXES = (".parquet",)
# Lines of a compressed file parsed and tokenized together (bounds a stream's text in memory).
STREAM_RECORDS = 4096


@dataclass(frozen=True)
class RecordFileNames(TextFiles):
    """Files with one of ``suffixes`` (others are ignored), split as the text dataset's."""

    suffixes: tuple[str, ...] = ()
    """File name endings of the format."""

    def in_directory(self, paths: list[str], root: str) -> dict[str, list[str]]:
        return super().in_directory([p for p in paths if p.endswith(self.suffixes)], root)


@dataclass(frozen=True)
class Texts:
    """Each record's text field one document, tokenized by the job's subword tokenizer. The
    records are read by ``RecordDocuments`` (never as a byte range of text), which hands their
    values to ``texts``."""

    level: ClassVar[str] = "word"  # losses read as perplexity per (subword) token
    text_field: str = "text"
    """The record field holding a document's text."""
    skip_bad_records: bool = False
    """Leave out (and count) malformed records instead of stopping at the first."""

    def texts(self, records: Numbered, url: str, unit: str) -> tuple[list[str], int]:
        """The documents of numbered records (JSON lines as bytes, or Parquet values), and
        how many malformed ones were left out."""
        texts, bad = [], 0
        for number, record in records:
            try:
                text = self.text_of(record)
            except ValueError as err:
                if not self.skip_bad_records:
                    raise CorpusFormatError(
                        f"{url}: {unit} {number}: {err}; fix it or pass --skip-bad-records"
                    ) from err
                bad += 1
            else:
                if text is not None:
                    texts.append(text)
        return texts, bad

    def text_of(self, record: bytes | object) -> str | None:
        """A record's document text; None for a blank JSON line (ValueError: malformed)."""
        if isinstance(record, bytes):
            if not record.strip():
                return None
            try:
                record = json.loads(record)
            except ValueError as err:  # UnicodeDecodeError and JSONDecodeError alike
                raise ValueError(f"not a JSON object ({err})") from None
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
            if self.text_field not in record:
                raise ValueError(f"no field {self.text_field!r} (set --text-field)")
            record = record[self.text_field]
        if not isinstance(record, str):
            raise ValueError(f"field {self.text_field!r} is {type(record).__name__}, not text")
        return record


# (number, record): a JSON line (bytes) or a Parquet value, numbered from 1 in its file.
Numbered = Iterable[tuple[int, object]]


@dataclass(frozen=True)
class RecordDocuments(Documents):
    """Documents that are records of files (JSONL, Parquet), tokenized by a subword tokenizer."""

    numbered: ClassVar[str] = "line"
    """What a record is called in errors (line, row)."""

    def batches(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator:
        """The records that begin in bytes [start, stop) of a file, in numbered batches."""
        raise NotImplementedError

    def texts(
        self, url: str, start: int, stop: int, end: int, options: dict
    ) -> Iterator[tuple[list[str], int]]:
        """(documents, malformed records left out) of each batch of a piece's records."""
        texts: Texts = self.tokenization
        for batch in self.batches(url, start, stop, end, options):
            yield texts.texts(batch, url, self.numbered)

    def encode_range(
        self, url: str, start: int, stop: int, end: int, storage_options: dict | None = None,
        vocab: Vocab | Subword | None = None,
    ) -> EncodedChunk:  # fmt: skip
        """The subword ids of the records that begin in bytes [start, stop) of a file."""
        if not isinstance(vocab, Subword):
            raise ValueError("record datasets (jsonl, parquet) are tokenized by a --tokenizer")
        ids, lengths, bad = [], [], 0
        for texts, skipped in self.texts(url, start, stop, end, storage_options or {}):
            batch_ids, batch_lengths = vocab.encode_documents(texts)
            ids.append(batch_ids)
            lengths.append(batch_lengths)
            bad += skipped
        return EncodedChunk(
            None,
            np.concatenate(ids) if ids else np.zeros(0, np.int32),
            np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
            stop - start,
            bad_records=bad,
        )


@dataclass(frozen=True)
class JsonLines(RecordDocuments):
    """JSONL files: plain ones in pieces cut at line starts, compressed ones whole as a stream
    (by the piece at their start)."""

    def batches(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator:
        """A compressed file's lines (all of them, in the piece at its start)."""
        if start > 0:
            return
        with (
            reading("corpus file", url),
            fsspec.open(url, "rb", compression="infer", **options) as f,
        ):
            lines = enumerate(io.BufferedReader(f), 1)  # zstandard's reader has no lines
            while batch := list(itertools.islice(lines, STREAM_RECORDS)):
                yield batch

    def texts(
        self, url: str, start: int, stop: int, end: int, options: dict
    ) -> Iterator[tuple[list[str], int]]:
        """A plain file's lines that start in [start, stop) in one batch; a compressed file's
        as a stream of batches."""
        if not url.endswith(".jsonl"):
            yield from super().texts(url, start, stop, end, options)
            return
        fs, path = fsspec.core.url_to_fs(url, **options)
        first = boundary_at_or_after(fs, path, url, next_line, start, end)
        last = boundary_at_or_after(fs, path, url, next_line, stop, end)
        lines = (read_range(fs, path, first, last, url) if last > first else b"").splitlines()
        texts: Texts = self.tokenization
        try:
            yield texts.texts(enumerate(lines, 1), url, self.numbered)
        except CorpusFormatError:  # number the malformed line in the file, counting only now
            texts.texts(enumerate(lines, lines_before(fs, path, url, first) + 1), url, "line")
            raise


def lines_before(fs, path: str, url: str, offset: int) -> int:
    """Newlines in the first ``offset`` bytes of a file (read in bounded blocks)."""
    block = 1 << 24
    return sum(
        read_range(fs, path, a, min(a + block, offset), url).count(b"\n")
        for a in range(0, offset, block)
    )


@dataclass(frozen=True)
class ParquetRows(RecordDocuments):
    """Parquet files: a piece reads the row groups whose first byte is in it, one at a time,
    only their text column."""

    numbered: ClassVar[str] = "row"

    def batches(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator:
        import pyarrow.parquet as pq  # an optional extra: txl-dist[parquet]

        field = self.tokenization.text_field
        fs, path = fsspec.core.url_to_fs(url, **options)
        with reading("corpus file", url), fs.open(path, "rb") as f:
            try:
                parquet = pq.ParquetFile(f)
            except Exception as err:  # pyarrow raises its own ArrowInvalid for a bad file
                raise CorpusFormatError(f"{url} is not a Parquet file: {err}") from err
            names = parquet.schema_arrow.names
            if field not in names:
                raise CorpusFormatError(
                    f"{url} has no column {field!r} (columns: {', '.join(names)}); set --text-field"
                )
            row = 0
            for group, first_byte, rows in row_groups(parquet.metadata):
                if start <= first_byte < stop:
                    values = parquet.read_row_group(group, columns=[field]).column(0).to_pylist()
                    yield list(zip(range(row + 1, row + rows + 1), values))
                row += rows


def row_groups(metadata) -> Iterator[tuple[int, int, int]]:
    """(index, first byte, rows) of each row group of a Parquet file."""
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        starts = [
            c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            for c in (group.column(k) for k in range(group.num_columns))
        ]
        yield i, min(starts), group.num_rows
