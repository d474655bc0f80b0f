"""Session-scoped runs shared by the integration tests: each trains once, many tests read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_pipeline.prepare import main as prepare_main
from tests.integration.runs import STEPS, train


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
