"""CorpusShares: a real prepared corpus's samples read with their tokens or by their ends alone."""

from __future__ import annotations

import numpy as np
import pytest

from bench.mix_shares import articles, write_jsonl
from data_pipeline import load_manifest, manifest_url, prepare
from data_pipeline.streams import MixSource, Reading
from data_pipeline.streams.shares import CorpusShares


@pytest.fixture(scope="module")
def cut_articles(shared_data, tmp_path_factory):
    """WikiText-103's first 40 articles in samples of 2,000 tokens: many cut between samples."""
    root = tmp_path_factory.mktemp("articles")
    found = articles(shared_data / "wikitext-103" / "wiki.train.tokens")[:40]
    write_jsonl(root / "src" / "train" / "docs.jsonl", found)
    layout = {"sample_size": 2_000, "shard_size": 20_000, "progress": False}
    prepare("jsonl", str(root / "wiki"), str(root / "src"), tokenizer="bpe:300", **layout)
    return root / "wiki"


def shares(root, order: str) -> CorpusShares:
    url = manifest_url(str(root), "train")
    return CorpusShares(MixSource("wiki", url, 1.0), load_manifest(url), 4, Reading(), order, 3)


@pytest.mark.parametrize("order", ["shuffle", "corpus"])
def test_ends_read_alone_are_the_ends_of_the_samples_read_whole(cut_articles, order):
    """Another rank's rows are walked by their document ends, read from the length arrays alone:
    in every epoch's document order they are where the tokens' documents end."""
    whole, ends_only = shares(cut_articles, order), shares(cut_articles, order)
    assert ends_only.table.continues.any()  # cut documents: their pieces stay put
    for epoch in (0, 1):
        size = int(whole.epoch_order(epoch).starts[-1])
        whole.load(epoch, 0, size)
        ends_only.load(epoch, 0, size, tokens=False)
        assert whole.samples.keys() == ends_only.samples.keys()
        for key, (tokens, ends) in whole.samples.items():
            assert tokens is not None and ends_only.samples[key][0] is None
            np.testing.assert_array_equal(ends_only.samples[key][1], ends)
    ends_only.load(1, 0, 1)  # tokens wanted where only the ends were read: read again, whole
    assert ends_only.samples[(1, 0)][0] is not None
    np.testing.assert_array_equal(ends_only.tokens(1, 0, 500), whole.tokens(1, 0, 500))
