"""ZeRO-3 on 2 ranks whose batches hold different adaptive-softmax clusters.

Rank 0 streams real WikiText-2 text with words from every cluster; rank 1 streams the same text
with every word outside the head cluster replaced, so its targets never reach a tail cluster.
If the ranks touched different parameters, ZeRO-3's gathers would disagree and the job would
die (gloo) or hang (NCCL).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from data_pipeline.cli import main as prepare_main
from data_pipeline.shards.format import manifest_url
from data_pipeline.streams.geometry import IGNORE_INDEX
from data_pipeline.streams.token_streams import TokenStreams
from tests.integration.real_size import take_lines
from tests.integration.runs import records, train

CUTOFFS = [300, 1_000]  # ~1,850 word types in the text: three clusters
SPLITS = {"train": 6_000, "valid": 1_500}  # words per rank


def write_split(directory: Path, lines: list[str], head: set[str]) -> None:
    """a.txt: the text as is; b.txt: the same lines with only head-cluster words."""
    directory.mkdir(parents=True)
    (directory / "a.txt").write_text("".join(lines))
    head_only = [" ".join(w if w in head else "the" for w in line.split()) + "\n" for line in lines]
    (directory / "b.txt").write_text("".join(head_only))


@pytest.fixture(scope="module")
def asymmetric_data(shared_data, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("asymmetric")
    text = shared_data / "wikitext-2" / "valid.txt"
    lines = take_lines(text, sum(SPLITS.values()))
    cut = len(lines) * SPLITS["train"] // sum(SPLITS.values())
    by_count = [w for w, _ in Counter(w for line in lines for w in line.split()).most_common()]
    vocab = ["<eos>", "<unk>"] + [w for w in by_count if w not in ("<eos>", "<unk>")]
    assert len(vocab) > CUTOFFS[1]  # words in every cluster
    head = set(vocab[: CUTOFFS[0]])
    write_split(root / "source" / "train", lines[:cut], head)
    write_split(root / "source" / "valid", lines[cut:], head)
    (root / "vocab.txt").write_text("".join(f"{w} 1\n" for w in vocab))
    args = ["--dataset", "text", "--text-docs", "file", "--source", str(root / "source")]
    args += ["--out", str(root / "data"), "--vocab", str(root / "vocab.txt"), "--no-progress"]
    assert prepare_main(args) == 0
    return root / "data"


def max_target(data: Path, split: str, rank: int, tgt_len: int) -> int:
    streams = TokenStreams(manifest_url(str(data), split), 1, tgt_len, rank, 2, seed=0, tail=True)
    try:
        return max(int(targets[targets != IGNORE_INDEX].max()) for _, targets in streams)
    finally:
        streams.close()


def test_zero3_trains_and_evaluates_when_only_one_rank_reaches_tail_clusters(
    asymmetric_data, tmp_path
):
    for split, tgt_len in (("train", 64), ("valid", 64)):
        assert max_target(asymmetric_data, split, rank=0, tgt_len=tgt_len) >= CUTOFFS[1]
        assert max_target(asymmetric_data, split, rank=1, tgt_len=tgt_len) < CUTOFFS[0]
    train(
        tmp_path,
        asymmetric_data,
        overrides=[
            "deepspeed.zero_optimization.stage=3",
            "train.global_rows=2",
            "train.max_steps=6",
            f"model.cutoffs={CUTOFFS}",
        ],
        timeout=600,
    )
    rows = records(tmp_path)
    assert all(math.isfinite(r["loss"]) for r in rows if "split" not in r)
    (valid,) = [r for r in rows if r.get("split") == "valid"]
    assert math.isfinite(valid["ppl"])
