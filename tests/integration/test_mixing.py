"""Training on data.mix with real DeepSpeed engines: two ranks train and save, one process
resumes; mix_tokens in every log row, every corpus evaluated, then their token-weighted mean."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from data_pipeline.cli import main as prepare_main
from tests.integration.runs import records, train

ROWS, TGT_LEN = 8, 64  # the tiny config's global rows and tgt_len


@pytest.fixture(scope="module")
def news(shared_data, wikitext, tmp_path_factory) -> Path:
    """One Billion Word sentences, a document each, with WikiText-103's vocabulary (the one of
    small_corpus, so the two mix)."""
    root = tmp_path_factory.mktemp("news")
    source = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    sentences = source.read_text(encoding="utf-8").splitlines(keepends=True)
    (root / "src").mkdir()
    for split, part in (("train", sentences[:600]), ("valid", sentences[600:800])):
        (root / "src" / f"{split}.txt").write_text("\n".join(part), encoding="utf-8")
    args = ["--dataset", "text", "--text-docs", "block", "--source", str(root / "src")]
    args += ["--vocab", str(wikitext / "vocab.txt"), "--out", str(root / "data"), "--no-progress"]
    assert prepare_main(args) == 0
    return root / "data"


@pytest.mark.slow
def test_a_mix_logs_its_tokens_evaluates_each_corpus_and_resumes_on_another_world_size(
    small_corpus, news, tmp_path
):
    mix = [
        {"name": "wiki", "path": str(small_corpus), "weight": 0.6},
        {"name": "news", "path": str(news), "weight": 0.4},
    ]
    overrides = ["data.path=null", f"data.mix={json.dumps(mix)}", "train.max_steps=6"]
    overrides += ["train.save_interval=3", "train.eval_interval=3"]
    out = tmp_path / "mixed"
    train(out, small_corpus, overrides=overrides)  # two ranks
    rows = records(out)
    drawn = {r["step"]: r["mix_tokens"] for r in rows if "split" not in r}
    assert list(drawn) == [1, 2, 3, 4, 5, 6]
    assert all(sum(d.values()) == step * ROWS * TGT_LEN for step, d in drawn.items())
    assert all(d["wiki"] > 0 and d["news"] > 0 for step, d in drawn.items() if step > 2)
    evals = [r for r in rows if r.get("split") == "valid"]
    assert [(r["step"], r.get("corpus")) for r in evals] == [
        (3, "wiki"), (3, "news"), (3, None), (6, "wiki"), (6, "news"), (6, None),
    ]  # fmt: skip
    wiki, news_, mean = evals[3:]
    assert mean["tokens"] == wiki["tokens"] + news_["tokens"]
    weighted = (wiki["loss"] * wiki["tokens"] + news_["loss"] * news_["tokens"]) / mean["tokens"]
    assert math.isclose(mean["loss"], weighted) and math.isclose(mean["ppl"], math.exp(weighted))

    # The state every rank saved holds all rows: one process resumes them, batch for batch.
    resumed = tmp_path / "resumed"
    checkpoint = str(out / "checkpoints" / "global_step3")
    train(resumed, small_corpus, nprocs=1, overrides=overrides, resume=checkpoint)
    again = {r["step"]: r["mix_tokens"] for r in records(resumed) if "split" not in r}
    assert again == {step: d for step, d in drawn.items() if step > 3}
