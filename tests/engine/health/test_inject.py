"""TXL_INJECT_SPIKE: random targets for a window of data positions, and nothing else."""

import pytest
import torch

from data_pipeline import IGNORE_INDEX
from txl_dist.engine.health.inject import BITFLIP_ENV, SPIKE_ENV, BitFlip, SpikeInjection


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


@pytest.mark.parametrize("value", ["5", "a:1", "5:1:2:3", "5:-1"])
def test_a_malformed_bit_flip_is_named(monkeypatch, value):
    monkeypatch.setenv(BITFLIP_ENV, value)
    with pytest.raises(ValueError, match=rf"^{BITFLIP_ENV}=.*expected STEP:RANK"):
        BitFlip.from_env()


def test_a_bit_flip_hits_its_step_and_rank_in_the_first_attempt_only(monkeypatch):
    monkeypatch.setenv(BITFLIP_ENV, "5:1")
    flip = BitFlip.from_env()
    assert flip == BitFlip(5, 1, None) and flip.hits(5, 1, attempt=1)
    assert not any([flip.hits(5, 1, 2), flip.hits(5, 0, 1), flip.hits(4, 1, 1)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_top_exponent_bit_makes_the_largest_gradient_huge(dtype):
    grad = torch.tensor([1e-3, -0.5, 0.25], dtype=dtype)
    hit = BitFlip(1, 0).flipped(grad)
    assert torch.equal(hit[[0, 2]], grad[[0, 2]]) and torch.equal(
        grad[1], torch.tensor(-0.5, dtype=dtype)
    )
    assert hit[1] < -1e4 if dtype == torch.float16 else hit[1] < -1e37  # the sign kept
    # the sign bit: two's complement of the integer view
    assert BitFlip(1, 0, bit=8 * grad.element_size() - 1).flipped(grad)[1] == 0.5
