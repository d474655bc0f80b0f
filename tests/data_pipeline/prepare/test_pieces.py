"""Work done in processes of its own: the answer comes back, and so does a failure."""

from __future__ import annotations

import os

import pytest

from data_pipeline.prepare.pieces import in_own_process
from data_pipeline.shards.errors import CorpusFormatError


def test_work_in_its_own_process_answers_from_another_process():
    assert in_own_process(os.getpid, "asking") != os.getpid()


def test_its_exception_is_raised_in_the_caller():
    def fails():
        raise CorpusFormatError("train.jsonl: line 3: not a JSON object")

    with pytest.raises(CorpusFormatError, match="train.jsonl: line 3: not a JSON object"):
        in_own_process(fails, "failing")


def test_a_process_that_dies_without_a_word_is_named():
    with pytest.raises(RuntimeError, match=r"the trainer died \(exit code 3\); out of memory\?"):
        in_own_process(lambda: os._exit(3), "the trainer")
