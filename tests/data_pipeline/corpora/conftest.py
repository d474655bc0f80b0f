"""Documents of real text: WikiText-103 articles and One Billion Word sentences."""

from __future__ import annotations

import pytest

from data_pipeline.corpora.subword import Subword

from ..conftest import TITLE


@pytest.fixture(scope="session")
def wikitext103_articles(shared_data) -> list[str]:
    """The articles of the shared WikiText-103 train file, each with its lines as they are."""
    text = (shared_data / "wikitext-103" / "wiki.train.tokens").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    starts = [
        i - 1
        for i in range(1, len(lines) - 1)
        if TITLE.match(lines[i].rstrip("\n")) and lines[i - 1] == " \n" == lines[i + 1]
    ]
    bounds = [0, *starts[1:], len(lines)]
    return ["".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]


@pytest.fixture(scope="session")
def lm1b_sentences(shared_data) -> list[str]:
    """The sentences (lines) of the shared One Billion Word held-out file."""
    path = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory, lm1b_sentences) -> str:
    """A byte-level BPE (the fast encoder's kind) as a tokenizer.json file."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    Subword.train_bpe(400, iter(lm1b_sentences[-1000:])).save(str(path))
    return str(path)
