"""Record corpora: JSONL and Parquet files whose records are documents, tokenized by a subword
tokenizer (subword.py).

* JSONL (``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst``): one JSON object per line, its
  ``--text-field`` the document; read by jsonl.py.
* Parquet (``*.parquet``): a row group belongs to the piece its first byte falls in, and pieces
  read only their row groups' text column, one row group at a time.

A record that is not an object with a string text field is an error naming the file and line
(or row); with ``--skip-bad-records`` it is left out and counted (the count is logged per unit).
So is a record too long (limits.RECORD_BYTES: never held, its bytes dropped as they stream past),
too deeply nested, holding a lone surrogate, or a pre-token too long for the tokenizer
(limits.PRE_TOKEN_BYTES). A compressed file that decompresses, or a Parquet row group whose text
decodes, to more than limits.DECOMPRESSED_BYTES is refused whole (before reading, where Parquet's
metadata says so).

A file whose first records (its first piece, or batch of a compressed file) all lack the field
is refused whole, skipping or not, naming the fields they have: the field is misnamed, so
leaving out record after record would only end in a corpus without text (as a Parquet file
without the column is refused).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import fsspec
import numpy as np

from data_pipeline.corpora.bytelevel import PreTokenCheck, PreTokenTooLong
from data_pipeline.corpora.encoding import Documents, EncodedChunk
from data_pipeline.corpora.splits import TextFiles
from data_pipeline.corpora.subword import Subword
from data_pipeline.limits import OVERSIZED, RECORD_BYTES
from data_pipeline.shards.errors import CorpusFormatError, reading
from data_pipeline.vocab import Vocab

PARQUET_SUFFIXES = (".parquet",)
SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class RecordFileNames(TextFiles):
    """Files with one of ``suffixes`` (others are ignored), split as the text dataset's."""

    suffixes: tuple[str, ...] = ()
    """File name endings of the format."""

    def in_directory(self, paths: list[str], root: str) -> dict[str, list[str]]:
        return super().in_directory([p for p in paths if p.endswith(self.suffixes)], root)


@dataclass(frozen=True)
class Place:
    """Where a piece's records are, to name one in an error."""

    url: str
    """The file."""
    unit: str
    """What a record is called (line, row)."""
    first: Callable[[], int] = lambda: 1
    """The number in the file of the piece's first record (asked only for an error: a plain
    file's lines before the piece are counted then)."""
    at_start: bool = True
    """Whether the piece starts at the file's first byte (its record 1 is the file's)."""

    def name(self, number: int) -> str:
        """``FILE: line N`` for the piece's ``number``-th record."""
        return f"{self.url}: {self.unit} {self.first() + number - 1}"


@dataclass
class Batch:
    """The documents of a batch of a piece's records."""

    place: Place
    """Where the records are."""
    texts: list[str]
    """The document of each good record."""
    numbers: list[int]
    """Each document's record, numbered from 1 in the piece."""
    bad: int
    """Malformed records left out (--skip-bad-records)."""


@dataclass(frozen=True)
class Texts:
    """Each record's text field one document, tokenized by the job's subword tokenizer. The
    records are read by ``RecordDocuments`` (never as a byte range of text), which hands their
    values to ``texts``."""

    level: ClassVar[str] = "subword"  # losses read as perplexity per subword token
    text_field: str = "text"
    """The record field holding a document's text."""
    skip_bad_records: bool = False
    """Leave out (and count) malformed records instead of stopping at the first."""

    def texts(self, records: Numbered, place: Place) -> Batch:
        """The documents of numbered records (JSON lines as bytes, Parquet values or
        OVERSIZED), each with its number, and how many malformed ones were left out."""
        batch = Batch(place, [], [], 0)
        opens_file = place.at_start and bool(records) and records[0][0] == 1
        for number, record in records:
            try:
                text = self.text_of(record)
            except MissingField as err:
                if opens_file:  # once: the file's first records, all of them, say
                    self.check_field_named(records, place)
                    opens_file = False
                batch.bad += self.refused(place, number, str(err))
            except ValueError as err:
                batch.bad += self.refused(place, number, str(err))
            else:
                if text is not None:
                    batch.texts.append(text)
                    batch.numbers.append(number)
        return batch

    def refused(self, place: Place, number: int, why: str) -> int:
        """A bad record: 1 (to count) with --skip-bad-records, else CorpusFormatError."""
        if not self.skip_bad_records:
            raise CorpusFormatError(
                f"{place.name(number)}: {why}; fix it or pass --skip-bad-records"
            )
        return 1

    def check_field_named(self, records: Numbered, place: Place) -> None:
        """Refuse a file whose first records (JSON lines) have no text field at all: a wrong
        --text-field, which --skip-bad-records would only turn into a corpus without text."""
        names: dict[str, None] = {}  # the fields they have, in order
        for _, record in records:
            try:
                value = json.loads(record)
            except (TypeError, ValueError, RecursionError):  # not a JSON line: no say
                continue
            if isinstance(value, dict):
                if self.text_field in value:
                    return
                names.update(dict.fromkeys(value))
        last = records[-1][0]
        raise CorpusFormatError(
            f"records in {place.url} (lines 1-{last}) have no field {self.text_field!r} "
            f"(their fields: {shown(list(names))}); pass --text-field NAME"
        )

    def text_of(self, record: bytes | object) -> str | None:
        """A record's document text; None for a blank JSON line (ValueError: malformed)."""
        if record is OVERSIZED:
            raise ValueError(f"a record of more than {RECORD_BYTES.named()} bytes")
        if isinstance(record, bytes):
            if not record.strip():
                return None
            record = self.json_field(record)
        if not isinstance(record, str):
            raise ValueError(f"field {self.text_field!r} is {type(record).__name__}, not text")
        if not record.isascii() and (surrogate := SURROGATE.search(record)):
            raise ValueError(f"its text holds a lone surrogate ({surrogate.group()!r}), no text")
        return record

    def json_field(self, line: bytes) -> object:
        """The text field of a JSON line (ValueError: no object holding it)."""
        try:
            record = json.loads(line)
        except ValueError as err:  # UnicodeDecodeError and JSONDecodeError alike
            raise ValueError(f"not a JSON object ({err})") from None
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not an object")
        if self.text_field not in record:
            raise MissingField(f"no field {self.text_field!r} (its fields: {shown(list(record))})")
        return record[self.text_field]


class MissingField(ValueError):
    """A JSON object without the text field."""


FIELDS_SHOWN = 10  # a record may have thousands: a line names the first few


def shown(names: list[str]) -> str:
    """Field names from a file, as repr writes them (escaped), the first FIELDS_SHOWN."""
    if not names:
        return "none"
    more = ", ..." if len(names) > FIELDS_SHOWN else ""
    return ", ".join(map(repr, names[:FIELDS_SHOWN])) + more


# (number, record): a JSON line (bytes), a Parquet value or OVERSIZED, numbered from 1 in its
# piece (a plain file's) or its file.
Numbered = Sequence[tuple[int, object]]


@dataclass(frozen=True)
class RecordDocuments(Documents):
    """Documents that are records of files (JSONL, Parquet), tokenized by a subword tokenizer."""

    numbered: ClassVar[str] = "line"
    """What a record is called in errors (line, row)."""

    def batches(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator:
        """The records that begin in bytes [start, stop) of a file, in numbered batches."""
        raise NotImplementedError

    def place(self, url: str, start: int, end: int, options: dict) -> Place:
        """Where the piece at ``start`` is (its records numbered from the file's start)."""
        return Place(url, self.numbered, at_start=start == 0)

    def texts(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator[Batch]:
        """The documents of each batch of a piece's records."""
        texts: Texts = self.tokenization
        place = self.place(url, start, end, options)
        for records in self.batches(url, start, stop, end, options):
            yield texts.texts(records, place)

    def trainable(
        self, url: str, start: int, stop: int, end: int, options: dict, check: PreTokenCheck
    ) -> Iterator[str]:
        """A piece's documents for the BPE trainer: those whose pre-tokens ``check`` passes."""
        texts: Texts = self.tokenization
        for batch in self.texts(url, start, stop, end, options):
            for text, number in zip(batch.texts, batch.numbers):
                try:
                    check(text)
                except PreTokenTooLong as err:
                    texts.refused(batch.place, number, str(err))
                else:
                    yield text

    def encode_range(
        self, url: str, start: int, stop: int, end: int, storage_options: dict | None = None,
        vocab: Vocab | Subword | None = None,
    ) -> EncodedChunk:  # fmt: skip
        """The subword ids of the records that begin in bytes [start, stop) of a file, each
        document's followed by the tokenizer's end-of-text token."""
        if not isinstance(vocab, Subword):
            raise ValueError("record datasets (jsonl, parquet) are tokenized by a --tokenizer")
        texts: Texts = self.tokenization
        ids, lengths, bad = [], [], 0
        for batch in self.texts(url, start, stop, end, storage_options or {}):
            encoded = vocab.encode_documents(batch.texts)
            for index, why in encoded.refused.items():
                bad += texts.refused(batch.place, batch.numbers[index], why)
            if vocab.eos_id is None:  # a tokenizer.json read by another path: no boundary
                ids.append(encoded.ids)
                lengths.append(encoded.lengths)
            else:  # encode(document) + [eos], document after document
                ends = np.cumsum(encoded.lengths)
                ids.append(np.insert(encoded.ids, ends, np.int32(vocab.eos_id)))
                lengths.append(encoded.lengths + 1)
            bad += batch.bad
        return EncodedChunk(
            None,
            np.concatenate(ids) if ids else np.zeros(0, np.int32),
            np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
            stop - start,
            bad_records=bad,
        )


@dataclass(frozen=True)
class ParquetRows(RecordDocuments):
    """Parquet files: a piece reads the row groups whose first byte is in it, one at a time,
    only their text column, within the caps (parquet.py)."""

    numbered: ClassVar[str] = "row"

    def batches(self, url: str, start: int, stop: int, end: int, options: dict) -> Iterator:
        from data_pipeline.corpora import parquet  # pyarrow: an optional extra, txl-dist[parquet]

        fs, path = fsspec.core.url_to_fs(url, **options)
        with reading("corpus file", url), fs.open(path, "rb") as f:
            yield from parquet.row_batches(f, url, self.tokenization.text_field, start, stop)
