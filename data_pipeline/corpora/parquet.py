"""A Parquet file's text column read within the caps on untrusted input (limits.py).

Before a row group is read, its metadata's size of the text column (uncompressed bytes, rows) is
checked against limits.DECOMPRESSED_BYTES; once read, the bytes its values decode to are counted
before any becomes a Python string, as a dictionary-encoded column is read as its dictionary and
indices (a 105 KB file can hold a million references to one long value: 4.6 GB once decoded).
Values become strings in batches of bounded bytes; one over limits.RECORD_BYTES never does.

A plain column is read in record batches of about BATCH_BYTES (by its metadata's bytes a row),
its pages 1 MiB at a time, so memory follows the batch, not the row group (a 200 MB group read
whole peaked at 1.5 GB); the decoded bytes are counted as the batches come. A dictionary-encoded
column is read whole, as its dictionary and indices (compact: the cap's rows check bounds them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data_pipeline.limits import DECOMPRESSED_BYTES, OVERSIZED, RECORD_BYTES, STREAM_RECORDS
from data_pipeline.shards.errors import CorpusFormatError

# Decoded bytes of text a batch makes Python strings of at once (and a plain column is read by).
BATCH_BYTES = 1 << 26
READ_BUFFER = 1 << 20  # bytes of a column chunk read at once
TEXT_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
              pa.types.is_large_binary)  # fmt: skip


def row_batches(f: BinaryIO, url: str, field: str, start: int, stop: int) -> Iterator[list]:
    """Numbered batches of the values of column ``field`` of the row groups whose first byte is
    in [start, stop) (rows numbered from 1 in the file)."""
    try:
        parquet = pq.ParquetFile(f, buffer_size=READ_BUFFER, pre_buffer=False)
    except Exception as err:  # pyarrow raises its own ArrowInvalid for a bad file
        raise CorpusFormatError(f"{url} is not a Parquet file: {err}") from err
    names = parquet.schema_arrow.names
    if field not in names:  # names from the file: printed as repr escapes them
        shown = ", ".join(map(repr, names))
        raise CorpusFormatError(
            f"{url} has no column {field!r} (columns: {shown}); set --text-field"
        )
    column = names.index(field)
    check_type(parquet.schema_arrow.field(column).type, url, field)
    by_dictionary = None  # opened at the first dictionary-encoded row group
    row = 0
    for group, first_byte, rows in row_groups(parquet.metadata):
        if start <= first_byte < stop:
            where = f"{url}: row group {group}"
            chunk = parquet.metadata.row_group(group).column(column)
            check_metadata(chunk.total_uncompressed_size, rows, where)
            if chunk.has_dictionary_page:
                by_dictionary = by_dictionary or pq.ParquetFile(f, read_dictionary=[field])
                values = by_dictionary.read_row_group(group, columns=[field]).column(0).chunks
                check_decoded(sum(int(decoded_sizes(v).sum()) for v in values), where)
            else:
                size = max(rows * BATCH_BYTES // max(chunk.total_uncompressed_size, 1), 1)
                batches = parquet.iter_batches(
                    min(size, STREAM_RECORDS),
                    row_groups=[group],
                    columns=[field],
                    use_threads=False,
                )
                values = (batch.column(0) for batch in batches)
            yield from value_batches(values, row, where)
        row += rows


def check_type(column: pa.DataType, url: str, field: str) -> None:
    """Refuse a text column that holds no text (a list of strings, numbers) in one line."""
    values = column.value_type if pa.types.is_dictionary(column) else column
    if not any(is_text(values) for is_text in TEXT_TYPES):
        raise CorpusFormatError(
            f"{url}: column {field!r} holds {str(column)!r}, not text (a string or binary column); "
            "set --text-field to its text column, or write the text as one string a row"
        )


def check_metadata(uncompressed: int, rows: int, where: str) -> None:
    """Refuse a row group whose metadata puts its text column over the cap, before reading it:
    its uncompressed bytes, or its rows (a row decodes to 4-8 bytes of offsets or indices)."""
    if uncompressed > DECOMPRESSED_BYTES.value() or rows * 8 > DECOMPRESSED_BYTES.value():
        raise CorpusFormatError(
            f"{where} holds {uncompressed} bytes of text in {rows} rows, over "
            f"{DECOMPRESSED_BYTES.named()} bytes decompressed: write it in smaller row groups"
        )


def check_decoded(total: int, where: str, more: str = "") -> None:
    """Refuse a row group whose text decodes to more than limits.DECOMPRESSED_BYTES."""
    if total > DECOMPRESSED_BYTES.value():
        raise CorpusFormatError(
            f"{where} decodes to {more}{total} bytes of text, over {DECOMPRESSED_BYTES.named()}: "
            "write it in smaller row groups (or raise the cap for a file you trust)"
        )


def value_batches(values: Iterable[pa.Array], row: int, where: str) -> Iterator[list]:
    """Numbered batches of a row group's text values (rows numbered after ``row``), a value
    over limits.RECORD_BYTES as OVERSIZED; refused once they decode to more than
    limits.DECOMPRESSED_BYTES."""
    most, total = RECORD_BYTES.value(), 0
    for chunk in values:
        chunk_sizes = decoded_sizes(chunk)
        total += int(chunk_sizes.sum())
        check_decoded(total, where, "at least ")
        oversized = chunk_sizes > most
        for a, b in batch_bounds(np.where(oversized, 0, chunk_sizes)):
            over = oversized[a:b]
            kept = chunk.slice(a, b - a).filter(pa.array(~over)).to_pylist()
            texts = iter(kept)
            yield [(row + a + k + 1, OVERSIZED if o else next(texts)) for k, o in enumerate(over)]
        row += len(chunk)


def batch_bounds(sizes: np.ndarray) -> Iterator[tuple[int, int]]:
    """[a, b) row ranges of at most STREAM_RECORDS rows, each holding at most BATCH_BYTES of
    ``sizes`` past its first row."""
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    by_bytes = np.searchsorted(ends, np.arange(BATCH_BYTES, total, BATCH_BYTES))
    cuts = np.union1d(by_bytes, np.arange(STREAM_RECORDS, len(sizes), STREAM_RECORDS))
    bounds = [0, *(int(c) for c in cuts if 0 < c < len(sizes)), len(sizes)]
    return zip(bounds, bounds[1:])


def decoded_sizes(chunk: pa.Array) -> np.ndarray:
    """int64 bytes each value decodes to (0 for nulls and values that are not text), read from
    the offsets (and a dictionary's indices): nothing is decoded."""
    dictionary = pa.types.is_dictionary(chunk.type)
    values = chunk.dictionary if dictionary else chunk
    if not any(is_text(values.type) for is_text in TEXT_TYPES):
        return np.zeros(len(chunk), np.int64)
    sizes = pc.binary_length(values)
    if dictionary:
        sizes = sizes.take(chunk.indices)
    return sizes.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def row_groups(metadata: pq.FileMetaData) -> Iterator[tuple[int, int, int]]:
    """(index, first byte, rows) of each row group of a Parquet file."""
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        starts = [
            c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            for c in (group.column(k) for k in range(group.num_columns))
        ]
        yield i, min(starts), group.num_rows
