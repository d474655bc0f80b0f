"""The evaluation loop: every token but the first scored exactly once, however many rows the
text is cut into, each row's memory carried across its segments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from data_pipeline import TextBatches
from data_pipeline.streams.geometry import Geometry
from tests.evaluation.conftest import CPU, whole
from txl_dist.evaluation.loop import EvalResult, evaluate, token_weighted


@pytest.mark.parametrize("rows", [1, 3])
def test_every_token_but_the_first_is_scored_once_with_its_rows_memory(model, rows):
    ids = np.random.default_rng(3).integers(0, 40, 29)
    result = evaluate(model, TextBatches(ids, rows, tgt_len=4), CPU, progress=False)
    assert result.tokens == len(ids) - 1
    g = Geometry.of(len(ids), rows, 4, tail=True)
    starts = [r * g.row_stride for r in range(rows)]
    chunks = [ids[s : s + g.inputs_in_row(r) + 1].tolist() for r, s in enumerate(starts)]
    expected = sum(whole(model, c).sum().item() for c in chunks) / (len(ids) - 1)
    assert result.loss == pytest.approx(expected, rel=1e-5)
    assert result.ppl == pytest.approx(math.exp(expected), rel=1e-5)


def test_a_mix_is_its_corpora_weighted_by_their_tokens():
    wiki, news = EvalResult(2.0, 7.39, 300, 1.5), EvalResult(3.0, 20.1, 100, 0.5)
    mean = token_weighted({"wiki": wiki, "news": news})
    assert (mean.loss, mean.tokens, mean.seconds) == (2.25, 400, 2.0)
    assert mean.ppl == pytest.approx(math.exp(2.25)) and mean.corpora == dict(wiki=wiki, news=news)
