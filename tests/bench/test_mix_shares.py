"""bench/mix_shares.py: the resampled corpora a larger bench is measured on."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench import mix_shares
from data_pipeline import load_manifest, manifest_url


@pytest.mark.slow
def test_resampled_corpora_hold_k_times_the_documents_drawn_from_the_real_ones(
    shared_data, tmp_path
):
    """Twice as many documents of each corpus, every one a real document (so its length one of
    the real lengths), several drawn more than once, prepared with the first's tokenizer."""
    times = 2
    real = mix_shares.sources(shared_data)
    roots = mix_shares.resampled(shared_data, tmp_path, times)
    tokenizer = (tmp_path / "long" / "tokenizer.json").read_text()
    for name, documents in real.items():
        drawn = [
            json.loads(line)["text"]
            for line in (tmp_path / f"resample-{times}" / "src" / name / "train" / "docs.jsonl")
            .read_text()
            .splitlines()
        ]
        assert len(drawn) == times * len(documents)
        assert set(drawn) <= set(documents)
        assert max(Counter(drawn).values()) > 1
        manifest = load_manifest(manifest_url(str(roots[name]), "train"))
        assert manifest.documents == times * len(documents)
        assert (roots[name] / "tokenizer.json").read_text() == tokenizer
    assert mix_shares.resampled(shared_data, tmp_path, times) == roots  # made once
