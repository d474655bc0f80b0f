import numpy as np

from txl_dist.process import resident

MIB = 1 << 20


def _touched(size: int) -> np.ndarray:
    return np.ones(size, dtype=np.uint8)  # every page written: resident


def test_a_mark_leaves_out_the_peak_before_it_and_the_run_keeps_it():
    _touched(256 * MIB)  # freed at once (a large array is its own mapping): the peak stays
    assert resident.beyond_now_at_peak_since_mark() >= 200 * MIB
    run_peak = resident.peak_bytes()
    assert resident.mark()
    assert resident.beyond_now_at_peak_since_mark() < 64 * MIB
    assert resident.peak_bytes() >= run_peak  # what the run reports as its peak is kept
    _touched(128 * MIB)
    assert 100 * MIB <= resident.beyond_now_at_peak_since_mark() < 200 * MIB
