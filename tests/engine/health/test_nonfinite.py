"""Non-finite losses counted on the device and bounded: the longest run in a row and the total,
carried across reads; fp32 at ZeRO-0, where DeepSpeed cannot skip an update, ends at the first."""

import math

import pytest
import torch

from txl_dist.engine.health.nonfinite import NonFinite, NonFiniteLossError

CPU = torch.device("cpu")


def counted(losses, max_in_a_row=5, can_skip=True, reads=(3,)) -> NonFinite:
    nonfinite = NonFinite(CPU, max_in_a_row, can_skip)
    for i, loss in enumerate(losses, 1):
        nonfinite.add(torch.tensor(loss))
        if i in reads:
            nonfinite.read()
    return nonfinite


def test_the_longest_run_in_a_row_spans_reads_and_the_total_counts_all():
    nan = math.nan
    nonfinite = counted([1.0, nan, nan, nan, 2.0, math.inf])  # read after the third
    assert nonfinite.check(step=6) == 4 and nonfinite.longest == 3
    nonfinite.clear()
    assert nonfinite.check(step=7) == 0


def test_a_run_ends_at_max_in_a_row_or_at_once_where_nothing_can_skip():
    with pytest.raises(NonFiniteLossError, match="3 consecutive steps had a non-finite loss"):
        counted([math.nan] * 3, max_in_a_row=3).check(step=3)
    with pytest.raises(NonFiniteLossError, match="fp32 and ZeRO stage 0"):
        counted([1.0, math.nan], can_skip=False).check(step=2)
