"""Evaluation batches of in-memory ids: cut as TokenStreams(tail=True) cuts, rows over ranks."""

import numpy as np
import torch

from data_pipeline.streams.text_batches import TextBatches


def test_text_batches_split_their_rows_over_ranks():
    ids = np.arange(100)
    whole = list(TextBatches(ids, rows=4, tgt_len=7))
    ranks = [list(TextBatches(ids, 4, 7, rank, 2)) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(whole)
    for step, (inputs, targets) in enumerate(whole):
        assert torch.equal(torch.cat([ranks[0][step][0], ranks[1][step][0]]), inputs)
        assert torch.equal(torch.cat([ranks[0][step][1], ranks[1][step][1]]), targets)
