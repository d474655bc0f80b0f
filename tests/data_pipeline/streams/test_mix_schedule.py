"""MixSchedule: the group's next corpus, and rows' starts spread over a row schedule's runs."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipeline.streams.mix_schedule import MixSchedule, RowStart, Run, RunTokens


def test_the_next_corpus_keeps_the_groups_deficits_smallest_a_document_ahead():
    schedule = MixSchedule([7, 3], [6000, 900])  # weights are normalized
    assert schedule.horizon == 0.7 * 6000 + 0.3 * 900
    # 8 rows want 5.6 in the long corpus: with no deficit, the 8th row rounds it up to 6 ...
    assert schedule.choose(np.array([0, 0]), np.array([5, 2]), 8) == 0
    # ... but not 1,200 tokens ahead of its share, and 6 rows there already make 7 too many.
    assert schedule.choose(np.array([4000, 0]), np.array([5, 2]), 8) == 1
    assert schedule.choose(np.array([0, 0]), np.array([6, 1]), 8) == 1
    # Far enough behind, the long corpus takes the row all the same.
    assert schedule.choose(np.array([0, 6000]), np.array([6, 1]), 8) == 0
    assert MixSchedule([1, 1], [10, 10]).choose(np.array([0, 0]), np.array([0, 0]), 1) == 0  # tie
    three = MixSchedule([0.5, 0.3, 0.2], [10, 10, 10])
    assert three.choose(np.array([50, 30, 20]), np.array([5, 3, 1]), 10) == 2


MIXES = [([0.7, 0.3], [6000, 900]), ([0.1, 0.9], [30, 5000]), ([0.5, 0.3, 0.2], [900, 6000, 120])]


@pytest.mark.parametrize("weights,means", MIXES)
def test_rows_start_in_each_corpus_as_often_as_its_token_share(weights, means):
    schedule = MixSchedule(weights, means)
    for seed in range(4):
        starts = schedule.starts(seed, 64)
        for corpus, weight in enumerate(weights):
            share = sum(s.corpus == corpus for s in starts) / 64
            assert abs(share - weight) <= 3 / 64, (seed, corpus, share)
        # Each row stands at a token of the walk, where the schedule had chosen its corpus.
        runs = schedule.walk(seed)
        assert all(holding(runs, s) is not None for s in starts)
        assert all(0 <= f < 1 for s in starts for f in s.fractions)
    assert schedule.starts(1, 8) == schedule.starts(1, 8) != schedule.starts(2, 8)


def holding(runs: list[list[Run]], start: RowStart) -> tuple[Run, int] | None:
    """The walk's run and document in it that hold ``start``'s token (None if none does)."""
    c = start.corpus
    others = [n for i, n in enumerate(start.counts) if i != c]
    for run in runs[c]:  # within a run only corpus c's count grows
        if [n for i, n in enumerate(run.begins[0]) if i != c] != others:
            continue
        for k, (begin, length) in enumerate(zip(run.begins, run.lengths)):
            if length >= start.rest and begin[c] + length - start.rest == start.counts[c]:
                return run, k
    return None


def test_the_walk_reads_runs_of_documents_of_the_corpus_furthest_behind_past_its_warm_up():
    schedule = MixSchedule([0.5, 0.5], [100, 50])  # no lengths: every document its mean's
    # 0-100: corpus 0; 100-150: corpus 1; 150-200: corpus 1 (0.5 x 150 - 50 = 25 behind); then
    # 0 again, every 200 tokens. The warm-up: 4 cycles of the longest mean / weight, 800 tokens.
    runs = schedule.walk(seed=0)
    assert runs[0][:2] == [Run(0, [[400, 400]], [100]), Run(0, [[500, 500]], [100])]
    assert runs[1][0] == Run(1, [[500, 400], [500, 450]], [50, 50])
    assert all(r.lengths == [100] for r in runs[0]) and all(r.tokens == 100 for r in runs[1])
    assert len(runs[0]) >= 255 and len(runs[1]) >= 127  # every run whole: the walk's last not


def test_a_token_of_a_run_has_the_walks_counts_and_the_rest_of_its_document():
    run = Run(1, [[500, 400], [500, 450]], [50, 50])
    assert run.at(100) == ([500, 400], 50)  # its first token
    assert run.at(70) == ([500, 430], 20)
    assert run.at(20) == ([500, 480], 20)
    assert run.at(1) == ([500, 499], 1)


def test_rows_take_quantiles_of_the_tokens_left_of_their_runs_among_all_tokens():
    """A token drawn from runs of 100 and 300 tokens has t or fewer of its run left with
    probability (min(t, 100) + min(t, 300)) / 400: quantile 0.25 is 50 left (in either run),
    0.5 is 100, 0.75 is 200 (only the longer run has that many)."""
    runs = RunTokens([Run(0, [[0, 0]], [300]), Run(0, [[0, 0], [60, 0]], [60, 40])])
    assert runs.at(0.25, 0.0) == ([50, 0], 10)  # the 100-token run, 50 before its end
    assert runs.at(0.25, 0.99) == ([250, 0], 50)
    assert runs.at(0.5, 0.5) == ([200, 0], 100) and runs.at(0.75, 0.0) == ([100, 0], 200)
    assert runs.at(0.0, 0.0)[1] == 1 and runs.at(1 - 1e-12, 0.0) == ([0, 0], 300)


def test_a_runs_rows_in_one_corpus_stand_ever_nearer_its_end_as_a_token_does_in_time():
    """Rows spread over the circle of weights stand, in each corpus, ordered by the tokens of
    their run left (the ones about to leave it next to the other corpus's rows about to
    enter): a run of few rows starts with its shares near the weights, not one row's
    document's worth off."""
    lengths = [np.array([1_000] * 9 + [46_000]), np.array([700, 900, 1_100])]
    schedule = MixSchedule([0.3, 0.7], [5_500, 900], lengths)
    runs = schedule.walk(seed=3)
    starts = schedule.starts(3, 64)
    for c in (0, 1):
        left = [left_of(runs, s) for s in starts if s.corpus == c]
        first = int(np.argmin(left))  # where the rows of this corpus wrap around the circle
        assert left[first:] + left[:first] == sorted(left), (c, left)
        assert len(left) in ((19, 20) if c == 0 else (44, 45))


def left_of(runs: list[list[Run]], start: RowStart) -> int:
    """Tokens of its run left at ``start``'s token."""
    run, k = holding(runs, start)
    return start.rest + sum(run.lengths[k + 1 :])


def running_deficits(weights, lengths, documents, seed) -> dict[int, float]:
    """Per corpus, how far behind its weight corpus 0 stands at a token of that corpus, on
    average over the tokens of a row that has run for ``documents`` documents of lengths drawn
    from ``lengths`` (the rule written out again, past the first tenth)."""
    rng = np.random.default_rng(seed)
    drawn = [iter(rng.choice(x, documents).tolist()) for x in lengths]
    counts, found = [0.0] * len(weights), {c: [0.0, 0] for c in range(len(weights))}
    for k in range(documents):
        total = sum(counts)
        corpus = max(range(len(weights)), key=lambda c: weights[c] * total - counts[c])
        length = next(drawn[corpus])
        if k > documents // 10:  # j tokens in: behind by (weight_0 - (corpus == 0)) x j more
            mean = weights[0] * total - counts[0] + (weights[0] - (corpus == 0)) * (length - 1) / 2
            found[corpus][0] += mean * length
            found[corpus][1] += length
        counts[corpus] += length
    return {c: tokens / n for c, (tokens, n) in found.items()}


def test_rows_start_as_far_behind_as_rows_that_have_run_with_the_real_lengths():
    """The bias's cause: after a long document the other corpus is read until the row is
    back at its weights, so how far behind a row stands depends on the real lengths (their
    spread), not only on their means. Rows started from a walk of mean lengths stood about a
    third nearer the weights than running rows (WikiText-103 articles at 0.3): their share of
    the long corpus was 3 to 9 points high for hundreds of steps."""
    lengths = [np.array([1_000] * 9 + [46_000]), np.array([700, 900, 1_100])]  # 5,500 and 900
    weights = [0.3, 0.7]
    schedule = MixSchedule(weights, [5_500, 900], lengths)
    running = running_deficits(weights, lengths, 20_000, seed=1)
    starts = [s for seed in range(8) for s in schedule.starts(seed, 256)]
    for corpus in (0, 1):
        behind = [0.3 * sum(s.counts) - s.counts[0] for s in starts if s.corpus == corpus]
        expected = running[corpus]
        assert abs(np.mean(behind) - expected) < 0.1 * abs(expected) + 300, (corpus, expected)
    # A walk of mean lengths stands far nearer.
    means = MixSchedule(weights, [5_500, 900]).starts(0, 256)
    near = np.mean([0.3 * sum(s.counts) - s.counts[0] for s in means if s.corpus == 1])
    assert abs(near) < abs(running[1]) / 3
