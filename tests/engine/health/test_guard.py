"""SpikeGuard: which steps check, a spike confirmed from the steps kept since the last check,
and the rollback refused once the rollbacks near it are used up."""

from __future__ import annotations

import pytest
import torch

from txl_dist.config.spikes import SpikesConfig
from txl_dist.engine.health.guard import SpikeGuard
from txl_dist.engine.health.record import Rollback, SpikeRecord
from txl_dist.engine.health.rollback import LossSpikeError
from txl_dist.engine.health.spikes import SpikeDetector
from txl_dist.engine.metrics import Metrics


@pytest.fixture
def guard(tmp_path, monkeypatch) -> SpikeGuard:
    monkeypatch.delenv("TXL_INJECT_SPIKE", raising=False)
    config = SpikesConfig(window=10, confirm_steps=2, check_interval=5, max_rollbacks=2)
    metrics = Metrics(str(tmp_path), enabled=True, run={})
    return SpikeGuard(config, SpikeRecord(SpikeDetector(config)), 1, metrics)


def trained(guard: SpikeGuard, losses: list[float], first_step: int = 1) -> None:
    """Steps from `first_step` on, each with its batch drawn and its loss kept."""
    for step, loss in enumerate(losses, first_step):
        targets = torch.arange(4)
        assert torch.equal(guard.batch(targets, vocab_size=10), targets)  # nothing injected
        guard.add(step, torch.tensor(loss), grad_norm=None)


def test_a_check_is_due_every_interval_and_before_a_save(guard):
    assert [s for s in range(1, 13) if guard.due(s, saving=False)] == [5, 10]
    assert guard.due(7, saving=True)
    guard.config.enabled = False
    assert not guard.due(10, saving=True)


def test_a_spike_is_confirmed_at_its_confirm_steps_with_its_first_step(guard):
    trained(guard, [3.0 + 0.01 * (i % 3) for i in range(10)])
    assert guard.check() is None and guard.record.position == 10
    trained(guard, [3.01, 9.0, 9.5, 3.0], first_step=11)
    spike = guard.check()
    assert (spike.first.step, spike.last.step, spike.first.position) == (12, 13, 12)
    assert spike.first.loss == 9.0 and spike.median == pytest.approx(3.01)
    assert guard.check() is None  # the kept steps went to the detector once


def test_a_spike_past_the_rollbacks_allowed_near_it_ends_the_run(guard):
    trained(guard, [3.0 + 0.01 * (i % 3) for i in range(10)] + [9.0, 9.5])
    spike = guard.check()
    done = Rollback(step=5, spike_step=4, loss=9.0, median=3.0, deviation=0.1, restored_step=0,
                    skipped=[1, 5])  # fmt: skip
    guard.record.rollbacks = [done, done]  # within rollback_window (1000) of step 12
    with pytest.raises(LossSpikeError, match="after 2 rollbacks within 1000 steps"):
        guard.roll_back(spike, None, 0, None, None)  # refused before anything is restored
