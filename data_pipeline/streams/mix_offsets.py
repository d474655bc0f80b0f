"""Where a mix's group schedule starts counting: per corpus, tokens added to the rows' counts,
solved before the run on the corpora's sampled lengths so that the expected shares hold their
weights from the first logged steps.

Why. The group schedule (MixSchedule.choose) keeps every corpus's deficit near a level that
depends on the mix: a corpus of long documents is left only where a document ends, so the
schedule rounds its rows up or down until the deficit has moved to that level. Rows that start
at zero deficit would read a few hundred tokens too many or too few of one corpus at the start:
at 8 rows and 0.7 of WikiText-103 articles against One Billion Word documents, 0.743 at step 20
(4 points over), while a start 500 tokens behind holds 0.69-0.70 there; at 0.3, zero holds and
200 tokens either way misses by 4 points (bench/mix_shares.py, docs/own-corpora.md). The level
differs with the mix and the rows, so it is solved for each run, from its own rows' starts.

How. For each candidate offset on a grid, a few futures of the schedule over lengths only (each
row's first document ends at its start's rest; later documents' lengths are drawn from the
corpus's sampled ones, seeded by the run's seed) give every corpus's share at SOLVED_STEPS; the
offset whose mean shares stand nearest the weights (least squares) is the run's. Three or more
corpora: each corpus but the last in turn, the last taking what sums them to zero.
"""

from __future__ import annotations

import heapq

import numpy as np

from data_pipeline.streams.mix_schedule import MASK64, MixSchedule, RowStart, splitmix64

SOLVED_STEPS = range(20, 301, 20)
"""Steps whose shares the start is solved for: the first 300, every 20th (later steps hold by
the schedule itself)."""
GRID = np.linspace(-1.0, 1.0, 81)
"""Candidate offsets, in units of the schedule's horizon (the mix's mean document by weight)."""
ROW_FUTURES = 64
"""Rows times futures simulated per candidate: 8 futures of 8 rows, 1 of 64 or more."""
EVENTS = 100_000
"""Document ends simulated per run start at most (about a quarter of a second): corpora of short
documents get fewer futures, then fewer steps (their start is forgotten sooner)."""
DRAWS = 256
"""Document lengths drawn per row and corpus for a future (it wraps around past them)."""


def start_offsets(
    schedule: MixSchedule, starts: list[RowStart], seed: int, tgt_len: int
) -> list[int]:
    """Per corpus, the tokens added to the group's counts at the start (they sum to zero)."""
    k, rows = len(schedule.weights), len(starts)
    per_candidate = EVENTS / len(GRID)
    # Document ends of one future over SOLVED_STEPS: rows x tokens / mean document by choice.
    per_token = float(np.sum(schedule.weights / schedule.mean_tokens))
    ends = rows * SOLVED_STEPS[-1] * tgt_len * per_token
    count = int(max(1, min(ROW_FUTURES // rows, per_candidate // max(ends, 1.0))))
    futures = [draws(schedule, rows, seed, f) for f in range(count)]
    last = SOLVED_STEPS[-1] * min(1.0, per_candidate / max(ends, 1.0))
    marks = [step * tgt_len for step in SOLVED_STEPS if step <= max(last, SOLVED_STEPS[0])]
    offsets = np.zeros(k)
    for c in range(k - 1):
        errors = []
        for value in GRID * schedule.horizon:
            offsets[c], offsets[-1] = value, 0.0
            offsets[-1] = -offsets.sum()
            shares = np.mean([simulate(schedule, starts, offsets, f, marks) for f in futures], 0)
            errors.append(float(np.mean((shares - schedule.weights) ** 2)))
        offsets[c], offsets[-1] = GRID[int(np.argmin(errors))] * schedule.horizon, 0.0
        offsets[-1] = -offsets.sum()
    return [round(x) for x in offsets[:-1]] + [-sum(round(x) for x in offsets[:-1])]


def draws(schedule: MixSchedule, rows: int, seed: int, future: int) -> np.ndarray:
    """[rows, corpora, DRAWS] document lengths of one future, drawn from the sampled ones."""
    rng = np.random.default_rng(splitmix64((seed ^ 0xF07E) & MASK64) + future)
    lengths = [rng.choice(found, (rows, DRAWS)) for found in schedule.lengths]
    return np.stack(lengths, axis=1)


def simulate(
    schedule: MixSchedule,
    starts: list[RowStart],
    offsets: np.ndarray,
    lengths: np.ndarray,
    marks: list[int],
) -> np.ndarray:
    """[marks, corpora]: every corpus's share of the tokens read by each of ``marks`` (tokens
    per row), the rows starting at ``starts`` with the group's counts offset by ``offsets``."""
    k = len(schedule.weights)
    corpus = [start.corpus for start in starts]
    since = [0.0] * len(starts)
    # Tokens read by t of corpus c: ended[c] + rows[c] * t - began[c] (the rows in c now).
    ended, began = offsets.tolist(), [0.0] * k
    rows = np.bincount(corpus, minlength=k).tolist()
    ends = [(float(start.rest), g) for g, start in enumerate(starts)]
    heapq.heapify(ends)
    used, shares = np.zeros((len(starts), k), np.int64), []
    while len(shares) < len(marks):
        t, g = heapq.heappop(ends)
        while len(shares) < len(marks) and marks[len(shares)] <= t:
            m = marks[len(shares)]
            shares.append([e + n * m - b - o for e, n, b, o in zip(ended, rows, began, offsets)])
        old = corpus[g]
        ended[old] += t - since[g]
        rows[old], began[old] = rows[old] - 1, began[old] - since[g]
        counts = [e + n * t - b for e, n, b in zip(ended, rows, began)]
        c = corpus[g] = schedule.choose(counts, rows, len(starts))
        rows[c], began[c], since[g] = rows[c] + 1, began[c] + t, t
        heapq.heappush(ends, (t + float(lengths[g, c, used[g, c] % DRAWS]), g))
        used[g, c] += 1
    read = np.array(shares)
    return read / read.sum(axis=1, keepdims=True)
