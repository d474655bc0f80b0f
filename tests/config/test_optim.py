"""The optim section: an optimizer and schedule it knows, Adam's two betas."""

import pytest

from txl_dist.config.optim import OPTIMIZERS, SCHEDULES, OptimConfig


@pytest.mark.parametrize(
    "values,message",
    [
        ({"name": "sgd"}, r"^optim\.name must be one of \('adam', 'adamw', 'lamb'\), got 'sgd'$"),
        ({"schedule": "linear"}, r"^optim\.schedule must be one of .*, got 'linear'$"),
        ({"betas": [0.9]}, r"^optim\.betas needs two values, got \[0\.9\]$"),
    ],
)
def test_an_optimizer_or_schedule_it_does_not_know_is_named(values, message):
    with pytest.raises(ValueError, match=message):
        OptimConfig(**values)


def test_every_optimizer_and_schedule_named_builds():
    for name in OPTIMIZERS:
        for schedule in SCHEDULES:
            assert OptimConfig(name=name, schedule=schedule).betas == [0.9, 0.999]
