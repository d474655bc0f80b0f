import math

import pytest

from txl_dist.config.optim import OptimConfig
from txl_dist.engine.schedule import lr_multiplier


def test_cosine_warms_up_linearly_then_decays_to_the_floor():
    f = lr_multiplier(OptimConfig(lr=1.0, warmup_steps=4, min_lr=0.1, schedule="cosine"), 100)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(50) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(100) == pytest.approx(0.1)
    assert f(150) == pytest.approx(0.1)  # past max_steps the floor holds


def test_inv_sqrt_matches_the_reference_lambda():
    f = lr_multiplier(OptimConfig(schedule="inv_sqrt", warmup_steps=16), 1000)
    assert f(8) == pytest.approx(8 / 16**1.5)
    assert f(64) == pytest.approx(64**-0.5)
    assert lr_multiplier(OptimConfig(schedule="inv_sqrt"), 10)(0) == 1.0


def test_constant_after_warmup():
    f = lr_multiplier(OptimConfig(schedule="constant", warmup_steps=2), 10)
    assert [f(s) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
