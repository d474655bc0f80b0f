"""Session-scoped runs shared by the integration tests: each trains once, many tests read it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from data_pipeline.cli import main as prepare_main
from tests.integration.runs import STEPS, train
from txl_dist.cli.export import export

VALID_BYTES = 100_000  # of the 1.1 MB valid split: evaluations of a few seconds, not minutes


@pytest.fixture(scope="session")
def wikitext(shared_data, tmp_path_factory) -> Path:
    """The WikiText-103 train prefix and the first 100 kB of valid, prepared with txl-prepare."""
    root = tmp_path_factory.mktemp("data")
    source = shared_data / "wikitext-103"
    (root / "src").mkdir()
    (root / "src" / "wiki.train.tokens").symlink_to(source / "wiki.train.tokens")
    with open(source / "wiki.valid.tokens", encoding="utf-8") as f:
        lines, size = [], 0
        while size < VALID_BYTES:
            lines.append(f.readline())
            size += len(lines[-1])
    (root / "src" / "wiki.valid.tokens").write_text("".join(lines), encoding="utf-8")
    out = root / "wt103"
    argv = ["--dataset", "wikitext-103", "--source", str(root / "src"), "--out", str(out)]
    assert prepare_main([*argv, "--no-progress"]) == 0
    return out


def first_lines(shared_data: Path, source: Path) -> list[str]:
    """WikiText-103's first 70 train and 30 valid lines written into `source`, one document per
    paragraph; txl-prepare's arguments for them."""
    source.mkdir()
    for split, lines in (("train", 70), ("valid", 30)):
        with open(shared_data / "wikitext-103" / f"wiki.{split}.tokens", encoding="utf-8") as f:
            head = [next(f) for _ in range(lines)]
        (source / f"{split}.txt").write_text("".join(head), encoding="utf-8")
    return ["--dataset", "text", "--text-docs", "block", "--source", str(source)]


@pytest.fixture(scope="session")
def small_corpus(shared_data, wikitext, tmp_path_factory) -> Path:
    """A few WikiText-103 paragraphs per split (one epoch: 9 steps of 8 x 64 tokens), with the
    full WikiText-103 vocabulary so the tiny config applies; documents are paragraphs."""
    root = tmp_path_factory.mktemp("small")
    args = first_lines(shared_data, root / "src")
    args += ["--vocab", str(wikitext / "vocab.txt"), "--out", str(root / "data"), "--no-progress"]
    assert prepare_main(args) == 0
    return root / "data"


@pytest.fixture(scope="session")
def zero_runs(wikitext, tmp_path_factory) -> dict[int, Path]:
    runs = {stage: tmp_path_factory.mktemp(f"zero{stage}") for stage in (0, 1, 2, 3)}

    def run(stage: int) -> None:
        overrides = [f"deepspeed.zero_optimization.stage={stage}", f"train.max_steps={STEPS}"]
        train(runs[stage], wikitext, overrides=overrides)

    # Two runs at a time: one's start-up, saves and evaluation leave cores the other's steps use.
    with ThreadPoolExecutor(2) as two_at_a_time:
        list(two_at_a_time.map(run, runs))
    return runs


@pytest.fixture(scope="session")
def exports(zero_runs, tmp_path_factory) -> dict[int, Path]:
    """Each stage's run exported in fp32 safetensors, the run directory given as CKPT_DIR."""
    out = tmp_path_factory.mktemp("exports")
    for stage, run in zero_runs.items():
        export(str(run), str(out / f"zero{stage}"))
    return {stage: out / f"zero{stage}" for stage in zero_runs}
