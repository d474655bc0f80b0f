"""Straggler scores from fake per-rank section times: who is named, when, and once."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from txl_dist.config.stragglers import StragglerConfig
from txl_dist.engine.health.stragglers import (
    SCORED,
    SECTIONS,
    SectionClock,
    Straggler,
    StragglerDetector,
    score,
)

DEFAULT = StragglerConfig()
FB = SCORED.index("forward_backward")


def interval(*ranks: dict[str, float]) -> torch.Tensor:
    """Ranks x SECTIONS seconds a step, each rank's sections given by name (others 0)."""
    return torch.tensor([[r.get(s, 0.0) for s in SECTIONS] for r in ranks], dtype=torch.float64)


EQUAL = dict(data=0.001, forward_backward=0.5, optimizer=0.1, communication=0.05)


def slowed(factor: float, section: str = "forward_backward") -> dict[str, float]:
    return {**EQUAL, section: EQUAL[section] * factor}


def detector(config: StragglerConfig = DEFAULT, ranks: int = 2):
    logged = []
    found = StragglerDetector(config, ranks, torch.device("cpu"), lambda r, line: logged.append(r))
    found.hosts = [f"node{r}" for r in range(ranks)]
    return found, logged


def test_relative_score_is_the_fastest_over_each_rank_and_flags_only_the_slow_section():
    scores = score(interval(EQUAL, EQUAL, slowed(1.5), EQUAL), None, DEFAULT)
    assert scores.relative[2, FB].item() == pytest.approx(1 / 1.5)
    assert scores.relative[0].tolist() == [1.0, 1.0, 1.0]
    assert scores.slow.nonzero().tolist() == [[2, FB]]


def test_a_section_slow_by_ratio_but_cheap_against_the_step_is_not_slow():
    # Three times the data wait, 2 ms more on a 650 ms step: relative 0.33, but nobody waits.
    scores = score(interval(EQUAL, slowed(3, "data")), None, DEFAULT)
    assert scores.relative[1, SCORED.index("data")].item() == pytest.approx(1 / 3)
    assert not scores.slow.any()


def test_a_section_that_took_no_time_scores_one():
    scores = score(interval({"forward_backward": 0.5}, {"forward_backward": 0.5}), None, DEFAULT)
    assert scores.relative.tolist() == [[1.0, 1.0, 1.0]] * 2
    assert scores.individual.tolist() == [[1.0, 1.0, 1.0]] * 2


def test_individual_threshold_spares_a_rank_as_fast_as_its_own_best():
    config = dataclasses.replace(DEFAULT, individual_threshold=0.9)
    always_slower = interval(EQUAL, slowed(1.5))  # a slower kind of node, from its first step
    best = always_slower[:, : len(SCORED)]
    assert score(always_slower, best, DEFAULT).slow.any()
    assert not score(always_slower, best, config).slow.any()
    newly_slow = interval(EQUAL, slowed(2))  # slower than it has ever been
    assert score(newly_slow, best, config).slow[1, FB]
    assert score(newly_slow, best, config).individual[1, FB].item() == pytest.approx(0.75)


def test_a_slowed_rank_is_named_at_its_consecutive_slow_interval_and_only_once():
    found, logged = detector(dataclasses.replace(DEFAULT, consecutive=3), ranks=3)
    named = [found.judge(interval(EQUAL, slowed(1.5), EQUAL), 10 * (i + 1)) for i in range(5)]
    assert [len(n) for n in named] == [0, 0, 1, 0, 0]
    (straggler,) = named[2]
    assert (straggler.rank, straggler.host, straggler.section) == (1, "node1", "forward_backward")
    assert (straggler.step, straggler.intervals) == (30, 3)
    assert straggler.seconds == pytest.approx(0.75) and straggler.median_s == pytest.approx(0.5)


def test_a_normal_interval_restarts_the_count():
    found, _ = detector()  # consecutive=2
    pattern = [1.5, 1.0, 1.5, 1.0, 1.5, 1.0, 1.5, 1.5]  # two slow intervals in a row at the end
    named = [found.judge(interval(EQUAL, slowed(f)), i) for i, f in enumerate(pattern)]
    assert [len(n) for n in named] == [0] * 7 + [1]


def test_ranks_within_the_noise_are_never_named():
    generator = torch.Generator().manual_seed(0)
    found, _ = detector(ranks=4)
    for step in range(50):
        noise = 1 + 0.25 * torch.rand(4, generator=generator)  # up to 25% apart, every interval
        ranks = [slowed(f.item()) for f in noise]
        assert not found.judge(interval(*ranks), step)


def test_stop_policy_gives_the_reason_and_keeps_the_stragglers_warn_goes_on():
    for policy, expected in (("warn", None), ("stop", "straggler rank 1 (host node1) in data")):
        found, logged = detector(dataclasses.replace(DEFAULT, policy=policy))
        named = Straggler(30, 1, "node1", "data", 0.3, 0.2, 0.5, 0.9, 3)
        assert found.act([named]) == expected
        assert found.stopped == ([named] if policy == "stop" else [])
        assert logged == [dict(event="straggler", **dataclasses.asdict(named))]


def test_the_line_names_rank_host_section_and_its_time_against_the_median():
    line = Straggler(150, 1, "gpu-07", "forward_backward", 0.75, 0.5, 0.66, 0.98, 3).line()
    assert line == (
        "straggler: rank 1 (host gpu-07) forward_backward 750.0 ms a step against the ranks' "
        "median 500.0 ms (1.50x; relative score 0.66) for 3 intervals to step 150"
    )


class FakeClock:
    """Seconds that pass only when a test says so: exact section times."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_clock_takes_communication_out_of_its_section_and_quartiles_over_steps():
    now = FakeClock()
    clock = SectionClock(now=now)

    def reduce_gradients():
        now.t += 3.0

    reduce = clock.communicating(reduce_gradients)
    # The lower quartile: a rank's quicker steps, not those other work on the machine slowed.
    for step_seconds in (3.0, 1.0, 1.0, 3.0, 100.0):
        with clock.timed("data"):
            now.t += 0.5
        with clock.timed("forward_backward"):
            now.t += step_seconds
            reduce()
        clock.step_done()
    assert clock.take_quartiles() == [0.5, 1.0, 0.0, 3.0]
    assert clock.steps == []  # the next interval starts afresh
