"""The spike detector: silent on training's own ups and downs, a spike once confirmed, its state
carried by a checkpoint."""

import math
import random

import pytest

from txl_dist.config.spikes import SpikesConfig
from txl_dist.engine.health.spikes import Observation, SpikeDetector, robust_z

WINDOW = 20


def detector(**settings) -> SpikeDetector:
    return SpikeDetector(SpikesConfig(window=WINDOW, confirm_steps=3, **settings))


def feed(spikes: SpikeDetector, losses, first_step=1, grad_norms=None):
    """Every step's verdict (None or a Spike)."""
    norms = grad_norms or [None] * len(losses)
    return [
        spikes.observe(Observation(first_step + i, first_step + i, loss, norm))
        for i, (loss, norm) in enumerate(zip(losses, norms))
    ]


def training_curve(steps: int, seed: int = 0) -> list[float]:
    """A loss falling from 10.4 as language models' do, with noise of 2% and a warm-up bump."""
    noise = random.Random(seed)
    curve = []
    for step in range(steps):
        loss = 3.5 + 7.0 * math.exp(-step / 60) + 0.3 * math.exp(-(((step - 40) / 8) ** 2))
        curve.append(loss * (1 + 0.02 * noise.gauss(0, 1)))
    return curve


def test_robust_z_measures_in_standard_deviations_of_the_window():
    median, deviation, z = robust_z(13.0, [9.0, 10.0, 11.0])
    assert (median, z) == (10.0, pytest.approx(3 / 1.4826))
    assert deviation == pytest.approx(1.4826)


@pytest.mark.parametrize("seed", range(5))
def test_a_falling_noisy_loss_with_a_warm_up_bump_never_fires(seed):
    spikes = detector()
    assert not any(feed(spikes, training_curve(600, seed)))
    assert spikes.suspect_since is None


def test_a_sudden_drop_never_fires():
    assert not any(feed(detector(), [5.0] * WINDOW + [2.0] * 50))


def test_nothing_fires_before_the_window_is_full():
    # The first 50 completes the window, unjudged; two spiky steps after it are not three.
    assert not any(feed(detector(), [5.0] * (WINDOW - 1) + [50.0] * 3))


def test_three_spiky_steps_in_a_row_are_a_spike_from_the_first():
    flat = [5.0 + 0.01 * (i % 3) for i in range(WINDOW)]
    verdicts = feed(detector(), [*flat, 9.0, 9.5, 10.0])
    spike = verdicts[-1]
    assert verdicts[:-1] == [None] * (WINDOW + 2)
    assert (spike.first.step, spike.first.loss, spike.last.step) == (WINDOW + 1, 9.0, WINDOW + 3)
    assert spike.median == pytest.approx(5.01)


def test_fewer_spiky_steps_are_noise_and_join_the_window():
    spikes = detector()
    flat = [5.0 + 0.01 * (i % 3) for i in range(WINDOW)]
    verdicts = feed(spikes, [*flat, 9.0, 9.0])
    assert spikes.suspect_since == WINDOW + 1  # a save waits now
    verdicts += feed(spikes, [5.0, 9.0, 9.0], first_step=WINDOW + 3)
    assert not any(verdicts)
    assert list(spikes.losses)[-3:] == [9.0, 9.0, 5.0]
    assert spikes.suspect_since == WINDOW + 4


def test_a_rise_within_min_rise_of_the_median_is_not_a_spike():
    # A flat loss has a tiny MAD: a 5% rise is many deviations, yet under min_rise (20%).
    flat = [5.0 + 0.001 * (i % 3) for i in range(WINDOW)]
    assert not any(feed(detector(), [*flat, 5.25, 5.25, 5.25, 5.25]))


def test_non_finite_losses_are_left_to_the_non_finite_count():
    flat = [5.0 + 0.01 * (i % 3) for i in range(WINDOW)]
    assert not any(feed(detector(), [*flat, math.nan, math.inf, math.nan, 5.0]))


def test_the_gradient_norm_counts_only_where_its_threshold_is_set():
    losses = [5.0 + 0.01 * (i % 3) for i in range(WINDOW + 3)]
    norms = [1.0 + 0.01 * (i % 3) for i in range(WINDOW)] + [30.0] * 3
    assert not any(feed(detector(), losses, grad_norms=norms))
    assert feed(detector(grad_norm_threshold=8.0), losses, grad_norms=norms)[-1] is not None


def test_the_state_round_trips_and_continues_alike():
    curve = training_curve(60)
    before = detector()
    feed(before, [*curve[:WINDOW], 20.0, 20.0])  # two suspects pending
    after = detector()
    after.load_state_dict(before.state_dict())
    assert after.state_dict() == before.state_dict()
    assert feed(after, [20.0], WINDOW + 3) == feed(before, [20.0], WINDOW + 3)


def test_the_bound_is_the_loss_just_spiky_enough_and_infinite_before_the_window_fills():
    spikes = detector()
    feed(spikes, [5.0] * (WINDOW - 1))
    assert spikes.bound() == math.inf
    feed(spikes, [5.0, 5.2] * 5, first_step=WINDOW)
    bound = spikes.bound()  # a flat window (MAD 0): min_rise above the median decides
    assert bound == pytest.approx(5.0 * 1.2)
    feed(spikes, [bound * 0.999, 5.0])  # just under: not spiky, kept
    assert spikes.suspects == []
    feed(spikes, [bound * 1.001], first_step=100)  # just over: a suspect
    assert len(spikes.suspects) == 1
