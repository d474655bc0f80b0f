"""Two attempts of a step compared: exactly on a CPU, within a tolerance on a GPU; the same
non-finite result is equal. (A step trained twice on 2 ranks: tests/integration/test_spikes.py.)"""

import math

from txl_dist.engine.health.rerun import RERUN_TOLERANCE, differ, outlier


def test_equal_results_and_the_same_nan_do_not_differ():
    assert not differ((5.0, 2.0), (5.0, 2.0))
    assert not differ((math.nan, math.inf), (math.nan, math.inf))


def test_a_changed_gradient_or_loss_differs():
    assert differ((5.0, math.inf), (5.0, 2.0))
    assert differ((5.0, 2.0), (5.000001, 2.0))
    assert differ((math.nan, 2.0), (5.0, 2.0))


def test_a_gpu_tolerance_forgives_the_last_bits_only():
    assert not differ((5.0, 2.0), (5.0 * (1 + 1e-6), 2.0), RERUN_TOLERANCE)
    assert differ((5.0, 2.0), (5.0, 2.5), RERUN_TOLERANCE)


def test_one_ranks_sum_a_million_times_every_others_or_not_finite_is_an_outlier():
    assert outlier([0.02, 3e36]) and outlier([-3e36, 0.02, 0.01]) and outlier([0.02, math.inf])
    assert not outlier([0.02, -0.0001]) and not outlier([1e-9, 1e-4, 0.5])
