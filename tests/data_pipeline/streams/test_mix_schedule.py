"""MixSchedule: the corpus furthest behind next, and rows' starts spread over the schedule."""

from __future__ import annotations

import pytest

from data_pipeline.streams.mix_schedule import MixSchedule


def test_the_next_corpus_is_the_one_furthest_behind_its_share():
    schedule = MixSchedule([7, 3], [6000, 900])  # weights are normalized
    assert schedule.next_corpus([0, 0]) == 0  # a tie: the first
    assert schedule.next_corpus([700, 299]) == 1  # 0.3 x 999 = 299.7: short is 0.7 behind
    assert schedule.next_corpus([699, 300]) == 0
    three = MixSchedule([0.5, 0.3, 0.2], [10, 10, 10])
    assert three.next_corpus([50, 30, 10]) == 2 and three.next_corpus([40, 30, 30]) == 0


MIXES = [([0.7, 0.3], [6000, 900]), ([0.1, 0.9], [30, 5000]), ([0.5, 0.3, 0.2], [900, 6000, 120])]


@pytest.mark.parametrize("weights,means", MIXES)
def test_rows_start_in_each_corpus_as_often_as_its_token_share(weights, means):
    schedule = MixSchedule(weights, means)
    for seed in range(4):
        starts = schedule.starts(seed, 64)
        for corpus, weight in enumerate(weights):
            share = sum(s.corpus == corpus for s in starts) / 64
            assert abs(share - weight) <= 3 / 64, (seed, corpus, share)
        # The walk's counts where each row's document began: the schedule's own choice there.
        assert all(schedule.next_corpus(s.counts) == s.corpus for s in starts)
        assert all(0 <= s.fraction < 1 for s in starts)
    assert schedule.starts(1, 8) == schedule.starts(1, 8) != schedule.starts(2, 8)


def test_the_walk_reads_mean_length_documents_of_the_corpus_furthest_behind():
    schedule = MixSchedule([0.5, 0.5], [100, 50])
    # 0-100: corpus 0; 100-150: corpus 1; 150-200: corpus 1 (0.5 x 150 - 50 = 25 behind); then 0.
    assert schedule.walk([10, 120, 170, 230]) == [
        (0, [0, 0]), (1, [100, 0]), (1, [100, 50]), (0, [100, 100]),
    ]  # fmt: skip
