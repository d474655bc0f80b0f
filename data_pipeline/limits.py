"""Caps on untrusted input, each replaced by an environment variable (docs/security.md's table).

A cap is read where it is checked, so the environment of a run (or of a test) sets it; a value
that is no positive whole number is refused in one line naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from data_pipeline.shards.errors import DataError


@dataclass(frozen=True)
class Limit:
    """A cap and the environment variable that replaces its default."""

    variable: str
    """The environment variable (a positive whole number)."""
    default: int
    """The cap while the variable is unset."""

    def value(self) -> int:
        """The cap in force."""
        text = os.environ.get(self.variable)
        if text is None:
            return self.default
        if not (text.isascii() and text.isdigit() and int(text) > 0):
            raise DataError(f"{self.variable}={text!r} must be a positive whole number")
        return int(text)

    def named(self) -> str:
        """The cap as messages name it, with the variable that sets it:
        ``TXL_MAX_RECORD_BYTES=16777216``."""
        return f"{self.variable}={self.value()}"


RECORD_BYTES = Limit("TXL_MAX_RECORD_BYTES", 16 << 20)
"""Bytes of one record: a JSON line, a Parquet value."""
PRE_TOKEN_BYTES = Limit("TXL_MAX_PRE_TOKEN_BYTES", 64 << 10)
"""UTF-8 bytes of one pre-token (the tokenizers library's BPE takes ~170 bytes of memory, and
its trainer minutes, per byte of one)."""
DECOMPRESSED_BYTES = Limit("TXL_MAX_DECOMPRESSED_BYTES", 1 << 30)
"""Bytes a compressed JSONL file decompresses to, and a Parquet row group's text column decodes
to: what a piece holds at once."""
TOKENIZER_BYTES = Limit("TXL_MAX_TOKENIZER_BYTES", 128 << 20)
"""Bytes of a tokenizer.json."""
VOCAB_SIZE = Limit("TXL_MAX_VOCAB_SIZE", 1 << 21)
"""Tokens of a subword tokenizer, given or trained (bpe:N)."""
METADATA_BYTES = Limit("TXL_MAX_METADATA_BYTES", 64 << 20)
"""Bytes of a JSON file of a received run, checkpoint or export (config.json, data.json,
txl.json, latest): ours hold kilobytes."""
VOCAB_BYTES = Limit("TXL_MAX_VOCAB_BYTES", 256 << 20)
"""Bytes of a vocab.txt (lm1b's 793,471 words take 10 MB)."""
TEXT_BYTES = Limit("TXL_MAX_TEXT_BYTES", 1 << 30)
"""Bytes of txl-eval --text's file (more: prepare it with txl-prepare and pass --data)."""
ARCHIVE_BYTES = Limit("TXL_ARCHIVE_MAX_BYTES", 16 << 30)
"""Uncompressed bytes of a source archive's split files (lm1b's whole archive holds 4.2 GB)."""
ARCHIVE_MEMBERS = Limit("TXL_ARCHIVE_MAX_MEMBERS", 10_000)
"""Members of a source archive (lm1b's holds a few hundred)."""


class Oversized:
    """Stands for a record over RECORD_BYTES, whose bytes were never held."""


OVERSIZED = Oversized()
"""What a record reader yields in place of a record over RECORD_BYTES (JSONL and Parquet)."""
STREAM_RECORDS = 4096
"""Records of a stream parsed and tokenized together: bounds a stream's text in memory."""
