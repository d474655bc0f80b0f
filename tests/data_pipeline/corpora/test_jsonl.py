"""JSONL files read as lines: long lines dropped as they stream past, a decompression capped."""

import pytest

from data_pipeline.corpora.jsonl import bounded_lines, capped
from data_pipeline.limits import OVERSIZED
from data_pipeline.shards.errors import CorpusFormatError


def test_lines_are_split_across_blocks_and_a_long_one_is_named_not_held():
    blocks = [b'{"a": 1}\n{"a"', b": 22}\n" + b"x" * 8, b"x" * 8 + b"\n", b"last"]
    assert list(bounded_lines(blocks, limit=10)) == [b'{"a": 1}', b'{"a": 22}', OVERSIZED, b"last"]
    assert list(bounded_lines([b"ab\ncd", b"e\n\nf"], limit=3)) == [b"ab", b"cde", b"", b"f"]
    assert list(bounded_lines([b"abcd", b"ef\ng"], limit=5)) == [OVERSIZED, b"g"]


def test_a_decompression_past_the_cap_is_refused_naming_the_file(monkeypatch):
    monkeypatch.setenv("TXL_MAX_DECOMPRESSED_BYTES", "10")
    assert list(capped([b"12345", b"67890"], "f.jsonl.gz")) == [b"12345", b"67890"]
    refusal = r"^f\.jsonl\.gz decompresses to more than TXL_MAX_DECOMPRESSED_BYTES=10 bytes"
    with pytest.raises(CorpusFormatError, match=refusal):
        list(capped([b"12345", b"67890", b"x"], "f.jsonl.gz"))
