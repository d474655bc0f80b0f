"""The harness model's requests on a loaded model: scored segment by segment through the memory,
they give what one pass over the whole text gives, batched or not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.evaluation.conftest import CPU, whole
from txl_dist.evaluation.requests import (
    rolling_loglikelihood,
    same_context_length,
    score_continuations,
)
from txl_dist.model import TransformerXL


def greedy_continuation(model: TransformerXL, context: list[int], n: int) -> list[int]:
    ids = list(context)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).log_probs[0, -1].argmax()))
    return ids[len(context) :]


def test_a_document_scores_as_one_pass_over_it(model):
    ids = np.random.default_rng(1).integers(0, 40, 11)
    expected = -whole(model, ids.tolist()).sum().item()
    assert rolling_loglikelihood(model, ids, CPU) == pytest.approx(expected, rel=1e-5)
    assert rolling_loglikelihood(model, ids[:1], CPU) == 0.0  # nothing to score


def test_continuations_score_after_their_context_batched_or_not(model):
    rng = np.random.default_rng(2)
    contexts = [rng.integers(0, 40, 6).tolist() for _ in range(2)]
    pairs = [
        (contexts[0], rng.integers(0, 40, 3).tolist()),
        (contexts[1], rng.integers(0, 40, 5).tolist()),  # past a segment's end
        (contexts[1], greedy_continuation(model, contexts[1], 2)),
    ]
    expected = [-whole(model, c + w)[len(c) - 1 :].sum().item() for c, w in pairs]
    batched = score_continuations(model, pairs, CPU)
    one_by_one = [score_continuations(model, [p], CPU)[0] for p in pairs]
    for scored in (batched, one_by_one):
        assert [ll for ll, _ in scored] == pytest.approx(expected, rel=1e-5)
        assert [greedy for _, greedy in scored][2] is True


def test_batches_hold_equally_long_contexts_up_to_the_batch_size():
    pairs = [([1] * 3, [2]), ([1] * 5, [2]), ([1] * 3, [2]), ([1] * 3, [2])]
    assert same_context_length(pairs, batch_size=2) == [[0, 2], [3], [1]]
