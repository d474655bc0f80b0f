"""The caps on untrusted input: each set by its environment variable, a bad value one line."""

from __future__ import annotations

import pytest

from data_pipeline.corpora.subword import Subword
from data_pipeline.limits import RECORD_BYTES, Limit

from .corpora.test_records import one_line_error, run_prepare, write_jsonl


def test_a_cap_is_its_variable_or_its_default(monkeypatch):
    cap = Limit("TXL_TEST_CAP", 7)
    monkeypatch.delenv("TXL_TEST_CAP", raising=False)
    assert cap.value() == 7 and cap.named() == "TXL_TEST_CAP=7"
    monkeypatch.setenv("TXL_TEST_CAP", "12")
    assert cap.value() == 12 and cap.named() == "TXL_TEST_CAP=12"


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1e6", "٣", ""])
def test_a_cap_that_is_no_positive_whole_number_is_one_line(tmp_path, monkeypatch, capsys, value):
    documents = [f"the cat {i} sat on the mat\n" for i in range(50)]
    write_jsonl(tmp_path / "src" / "train" / "news.jsonl", documents)
    Subword.train_bpe(300, iter(documents)).save(str(tmp_path / "tokenizer.json"))
    monkeypatch.setenv(RECORD_BYTES.variable, value)
    options = ["--dataset", "jsonl", "--tokenizer", str(tmp_path / "tokenizer.json")]
    assert run_prepare(tmp_path / "src", tmp_path / "out", *options) == 2
    assert f"TXL_MAX_RECORD_BYTES={value!r} must be a positive whole number" in one_line_error(
        capsys
    )
