"""MixSchedule: the corpus furthest behind next, and rows' starts spread over the schedule."""

from __future__ import annotations

import numpy as np
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
        assert all(0 <= f < 1 for s in starts for f in s.fractions)
    assert schedule.starts(1, 8) == schedule.starts(1, 8) != schedule.starts(2, 8)


def test_the_walk_reads_documents_of_the_corpus_furthest_behind_past_its_warm_up():
    schedule = MixSchedule([0.5, 0.5], [100, 50])  # no lengths: every document its mean's
    # 0-100: corpus 0; 100-150: corpus 1; 150-200: corpus 1 (0.5 x 150 - 50 = 25 behind); then
    # 0 again, every 200 tokens. The warm-up: 4 cycles of the longest mean / weight, 800 tokens.
    # Each corpus's begins are ordered by how far behind it stood (ties in the walk's order).
    begins = schedule.walk(seed=0)
    assert begins[0][:2] == [[400, 400], [500, 500]]  # 0 behind, every time
    assert begins[1][:2] == [[500, 450], [600, 550]]  # 25 behind, then the ones 50 behind
    assert [500, 400] in begins[1] and [600, 500] in begins[1]
    assert len(begins[0]) >= 256 and len(begins[1]) >= 256


def running_deficits(weights, lengths, documents, seed) -> dict[int, list[float]]:
    """Per corpus, how far behind its weight corpus 0 stands where a document of that corpus
    begins, in a row that has run for ``documents`` documents of lengths drawn from
    ``lengths`` (the rule written out again, past the first tenth)."""
    rng = np.random.default_rng(seed)
    drawn = [iter(rng.choice(x, documents).tolist()) for x in lengths]
    counts, found = [0.0] * len(weights), {c: [] for c in range(len(weights))}
    for k in range(documents):
        total = sum(counts)
        corpus = max(range(len(weights)), key=lambda c: weights[c] * total - counts[c])
        if k > documents // 10:
            found[corpus].append(weights[0] * total - counts[0])
        counts[corpus] += next(drawn[corpus])
    return found


def test_rows_start_as_far_behind_as_rows_that_have_run_with_the_real_lengths():
    """The bias's cause: after a long document the other corpus is read until the row is
    back at its weights, so how far behind a row stands where a document begins depends on the
    real lengths (their spread), not only on their means. Rows started from a walk of mean
    lengths stood about a third nearer the weights than running rows (WikiText-103 articles
    at 0.3): their share of the long corpus was 3 to 9 points high for hundreds of steps."""
    lengths = [np.array([1_000] * 9 + [46_000]), np.array([700, 900, 1_100])]  # 5,500 and 900
    weights = [0.3, 0.7]
    schedule = MixSchedule(weights, [5_500, 900], lengths)
    running = running_deficits(weights, lengths, 20_000, seed=1)
    starts = [s for seed in range(8) for s in schedule.starts(seed, 256)]
    for corpus in (0, 1):
        behind = [0.3 * sum(s.counts) - s.counts[0] for s in starts if s.corpus == corpus]
        expected = np.mean(running[corpus])
        assert abs(np.mean(behind) - expected) < 0.1 * abs(expected) + 300, (corpus, expected)
    # A walk of mean lengths stands far nearer: the deficit where a short document begins.
    means = MixSchedule(weights, [5_500, 900]).starts(0, 256)
    near = np.mean([0.3 * sum(s.counts) - s.counts[0] for s in means if s.corpus == 1])
    assert abs(near) < abs(np.mean(running[1])) / 3


def test_rows_in_one_corpus_take_quantiles_of_how_far_behind_it_stood():
    """Stratified, not drawn: a run of few rows is not left with all of them far behind."""
    lengths = [np.array([1_000] * 9 + [46_000]), np.array([700, 900, 1_100])]
    schedule = MixSchedule([0.3, 0.7], [5_500, 900], lengths)
    behind = sorted(0.7 * sum(n) - n[1] for n in schedule.walk(seed=3)[1])
    deciles = [behind[len(behind) * k // 10] for k in range(1, 10)]
    rows = [0.7 * sum(s.counts) - s.counts[1] for s in schedule.starts(3, 64) if s.corpus == 1]
    counts = np.bincount(np.searchsorted(deciles, rows, side="right"), minlength=10)
    assert len(rows) in (44, 45) and counts.min() >= 4 and counts.max() <= 5, counts
