"""Evaluation batches of token ids held in memory (a text file, a harness document), cut
exactly as `TokenStreams(tail=True)` cuts a prepared split: the same rows, segments and
padding, so a text scores as the same tokens prepared would."""

from __future__ import annotations

import numpy as np
import torch

from data_pipeline.shards.errors import DataError
from data_pipeline.streams.geometry import IGNORE_INDEX, Geometry


class TextBatches:
    """Evaluation batches of token ids in memory, cut exactly as TokenStreams(tail=True) cuts.

    `rows` is the global row count; rank `rank` of `world_size` gets its share, as a
    TokenStreams rank does.
    """

    def __init__(
        self, ids: np.ndarray, rows: int, tgt_len: int, rank: int = 0, world_size: int = 1
    ):
        if len(ids) < 2:
            raise DataError("the text has fewer than 2 tokens: nothing to score")
        self.ids = np.asarray(ids, dtype=np.int64)
        self.geometry = Geometry.of(len(ids), rows, tgt_len, tail=True)
        share = rows // world_size
        self.mine = range(rank * share, (rank + 1) * share)

    @property
    def steps_per_epoch(self) -> int:
        return self.geometry.steps

    def __iter__(self):
        g = self.geometry
        rows = torch.zeros(len(self.mine), g.row_stride + 1, dtype=torch.int64)
        valid = torch.tensor([g.inputs_in_row(r) for r in self.mine])
        for i, (r, n) in enumerate(zip(self.mine, valid.tolist())):
            if n:  # n inputs need n + 1 tokens; the rest of the row is padding
                start = r * g.row_stride
                rows[i, : n + 1] = torch.from_numpy(self.ids[start : start + n + 1])
        targets = rows[:, 1:].clone()
        targets[torch.arange(g.row_stride)[None, :] >= valid[:, None]] = IGNORE_INDEX
        for step in range(g.steps):
            cols = slice(step * g.tgt_len, step * g.tgt_len + g.width(step))
            yield rows[:, cols], targets[:, cols]
