"""Effective context and RECL on hand-made loss curves whose answers are worked out below."""

from __future__ import annotations

import math

import numpy as np
import pytest

from txl_dist.evaluation.context import attention_length, effective_context, recl, relative_gain


def test_attention_length_counts_what_one_prediction_sees():
    assert attention_length(tgt_len=64, mem_len=128, same_length=True) == 128
    assert attention_length(tgt_len=64, mem_len=128, same_length=False) == 192
    assert attention_length(tgt_len=64, mem_len=0, same_length=False) == 64


def test_effective_context_is_the_shortest_within_the_threshold():
    contexts, losses = [0, 32, 64, 128], [6.0, 5.2, 5.04, 5.0]
    # 1%: within 5.05 -> 64 (5.04); 5%: within 5.25 -> 32 (5.2); 0.1%: only 128 itself
    assert effective_context(contexts, losses, 0.01) == 64
    assert effective_context(contexts, losses, 0.05) == 32
    assert effective_context(contexts, losses, 0.001) == 128
    # a shorter context that beats the longest one counts; the order given does not matter
    assert effective_context([128, 64, 32], [5.0, 4.9, 5.3], 0.01) == 64


# Two models, two contexts, four tokens: l[i, k, t].
# b(c0) = min over models = [1.0, 2.0, 2.8, 4.0] (no ties).
HAND = np.array(
    [
        [[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 2.0, 4.0]],  # model A at c0, c1
        [[2.0, 2.5, 2.8, 5.0], [0.5, 2.5, 2.0, 3.0]],  # model B at c0, c1
    ]
)


@pytest.mark.parametrize(
    "r, model, f_short, f_long",
    [
        # r = 1: T = all four tokens, f(c0, c0) = mean b = 9.8 / 4
        (1.0, 0, 9.8 / 4, (1 + 1 + 2 + 4) / 4),  # min(b, l_A(c1)) = [1, 1, 2, 4]
        (1.0, 1, 9.8 / 4, (0.5 + 2 + 2 + 3) / 4),  # min(b, l_B(c1)) = [0.5, 2, 2, 3]
        # r = 0.5: T = the two largest b: tokens 3 (4.0) and 2 (2.8), f(c0, c0) = 3.4
        (0.5, 0, 3.4, (4 + 2) / 2),  # min([4, 2.8], [4, 2]) = [4, 2]
        (0.5, 1, 3.4, (3 + 2) / 2),  # min([4, 2.8], [3, 2]) = [3, 2]
    ],
)
def test_relative_gain_is_the_papers_relative_perplexity_reduction(r, model, f_short, f_long):
    expected = (math.exp(f_short) - math.exp(f_long)) / math.exp(f_short)
    assert relative_gain(HAND, model, 0, 1, r) == pytest.approx(expected, rel=1e-12)


def constant(curves: list[list[float]], tokens: int = 5) -> np.ndarray:
    """Every token of model i at context k has loss curves[i][k]."""
    return np.repeat(np.array(curves, dtype=np.float64)[:, :, None], tokens, axis=2)


def test_recl_stops_where_the_gain_over_the_group_baseline_falls_below_threshold():
    # A: 3.0 -> 2.0 -> 1.999.  B: 3.5 -> 3.4 -> 3.3.
    # c=100: b = 3.0 (A). g_A = 1 - e^(2.0 - 3.0) = 0.63 >= 1%, go on;
    #        g_B = 1 - e^(min(3.0, 3.4) - 3.0) = 0 < 1%: RECL_B = 100.
    # c=200: b = 2.0 (A). g_A = 1 - e^(1.999 - 2.0) = 0.1% < 1%: RECL_A = 200.
    group = constant([[3.0, 2.0, 1.999], [3.5, 3.4, 3.3]])
    a, b = recl(group, [100, 200, 300], r=1.0)
    assert (a.length, a.capped) == (200, False)
    assert (b.length, b.capped) == (100, False)
    # Alone, B is its own baseline: 1 - e^-0.1 = 9.5% at every step, past the longest context.
    (alone,) = recl(constant([[3.5, 3.4, 3.3]]), [100, 200, 300], r=1.0)
    assert (alone.length, alone.capped) == (300, True)
    # A higher threshold (10%) stops B alone at the first step.
    (strict,) = recl(constant([[3.5, 3.4, 3.3]]), [100, 200, 300], r=1.0, threshold=0.1)
    assert strict.length == 100


def test_recl_returns_the_first_stop_even_if_longer_context_helps_later():
    # 3.0 -> 2.999 gains 0.1% (< 1%): RECL = 100 although 300 would gain a lot (the paper's loop).
    (only,) = recl(constant([[3.0, 2.999, 1.0]]), [100, 200, 300], r=1.0)
    assert only.length == 100


def test_recl_on_the_hardest_tokens_depends_on_r():
    # Token 0 is hard: 9.0 -> 8.9 -> 8.9; four easy tokens stay at 1.0. Threshold 5%.
    # r = 0.2 -> T = {token 0}: g(c0, c1) = 1 - e^-0.1 = 9.5%, go on; g(c1, c2) = 0: RECL 200.
    # r = 1 -> f(c0, c0) = (9 + 4) / 5, f(c0, c1) = (8.9 + 4) / 5: g = 1 - e^-0.02 = 2%: RECL 100.
    easy = [1.0, 1.0, 1.0]
    tokens = np.array([[[9.0, 8.9, 8.9], easy, easy, easy, easy]]).transpose(0, 2, 1)
    assert recl(tokens, [100, 200, 300], r=0.2, threshold=0.05)[0].length == 200
    assert recl(tokens, [100, 200, 300], r=1.0, threshold=0.05)[0].length == 100


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="increasing"):
        recl(constant([[3.0, 2.0]]), [200, 100], r=1.0)
    with pytest.raises(ValueError, match="r must be"):
        recl(constant([[3.0, 2.0]]), [100, 200], r=0.0)
