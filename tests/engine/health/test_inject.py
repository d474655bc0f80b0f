"""TXL_INJECT_SPIKE: random targets for a window of data positions, and nothing else."""

import pytest
import torch

from data_pipeline import IGNORE_INDEX
from txl_dist.engine.health.inject import SPIKE_ENV, SpikeInjection


def test_unset_injects_nothing(monkeypatch):
    monkeypatch.delenv(SPIKE_ENV, raising=False)
    assert SpikeInjection.from_env() is None


@pytest.mark.parametrize("value", ["5", "5-", "a-b", "7-5", "0-3", "1-2-3"])
def test_a_malformed_window_is_named(monkeypatch, value):
    monkeypatch.setenv(SPIKE_ENV, value)
    with pytest.raises(ValueError, match=rf"^{SPIKE_ENV}=.*expected A-B"):
        SpikeInjection.from_env()


def test_only_the_window_gets_random_targets_the_padding_kept(monkeypatch):
    monkeypatch.setenv(SPIKE_ENV, "3-4")
    inject = SpikeInjection.from_env()
    targets = torch.arange(40).reshape(2, 20) % 7
    targets[1, -3:] = IGNORE_INDEX
    assert inject.apply(2, targets, 1000) is targets and inject.apply(5, targets, 1000) is targets
    noisy = inject.apply(3, targets, 1000)
    assert (noisy[1, -3:] == IGNORE_INDEX).all()
    changed = noisy[:, :-3] != targets[:, :-3]
    assert changed.float().mean() > 0.9  # 7 of 1000 ids may match by chance
    assert torch.equal(noisy, inject.apply(3, targets, 1000))  # the same on every rank and try
