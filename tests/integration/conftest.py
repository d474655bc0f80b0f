"""Session-scoped runs shared by the integration tests: each trains once, many tests read it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from data_pipeline.prepare import main as prepare_main
from tests.integration.runs import STEPS, train

# DeepSpeed JIT-builds its CPU communication op on first use into a cache shared by every Python
# environment of the user; checkouts with their own .venv then rebuild it in turn and wait on each
# other's build lock. One cache per environment builds once.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))


@pytest.fixture(scope="session")
def wikitext(shared_data, tmp_path_factory) -> Path:
    """The WikiText-103 train prefix and valid split, prepared with txl-prepare."""
    out = tmp_path_factory.mktemp("data") / "wt103"
    source = shared_data / "wikitext-103"
    assert (
        prepare_main(["--dataset", "wikitext-103", "--source", str(source), "--out", str(out)]) == 0
    )
    return out


@pytest.fixture(scope="session")
def small_corpus(shared_data, wikitext, tmp_path_factory) -> Path:
    """A few WikiText-103 paragraphs per split (one epoch: 9 steps of 8 x 64 tokens), with the
    full WikiText-103 vocabulary so the tiny config applies; documents are paragraphs."""
    root = tmp_path_factory.mktemp("small")
    (root / "src").mkdir()
    for split, lines in (("train", 70), ("valid", 30)):
        with open(shared_data / "wikitext-103" / f"wiki.{split}.tokens", encoding="utf-8") as f:
            head = [next(f) for _ in range(lines)]
        (root / "src" / f"{split}.txt").write_text("".join(head), encoding="utf-8")
    args = ["--dataset", "text", "--text-docs", "block", "--source", str(root / "src")]
    args += ["--vocab", str(wikitext / "vocab.txt"), "--out", str(root / "data"), "--no-progress"]
    assert prepare_main(args) == 0
    return root / "data"


@pytest.fixture(scope="session")
def zero_runs(wikitext, tmp_path_factory) -> dict[int, Path]:
    runs = {}
    for stage in (0, 1, 2, 3):
        out = tmp_path_factory.mktemp(f"zero{stage}")
        train(
            out,
            wikitext,
            overrides=[f"deepspeed.zero_optimization.stage={stage}", f"train.max_steps={STEPS}"],
        )
        runs[stage] = out
    return runs
