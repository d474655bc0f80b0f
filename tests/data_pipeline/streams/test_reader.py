"""Samples fetched with ranged reads: neighbours in one shard coalesce into one read."""

import numpy as np

from data_pipeline.streams.reader import contiguous_runs


def test_consecutive_samples_of_one_shard_are_one_run():
    shard_of = np.array([0, 0, 0, 1, 1, 1, 2])
    assert contiguous_runs([0, 1, 2, 3, 5, 6], shard_of) == [[0, 1, 2], [3], [5], [6]]
    assert contiguous_runs([1, 4, 5], shard_of) == [[1], [4, 5]]
    assert contiguous_runs([], shard_of) == []
