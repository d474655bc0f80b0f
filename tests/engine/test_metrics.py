import pytest
import torch

from txl_dist.engine.metrics import Throughput
from txl_dist.model.accounting import forward_flops_per_token
from txl_dist.model.config import TXLConfig


def test_mfu_is_the_jobs_model_flops_over_the_peak_of_all_its_ranks():
    model = TXLConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_token=100)
    throughput = Throughput.of(model, peak_tflops=2.0, device=torch.device("cpu"), ranks=4)
    tokens_per_s = 1e5
    expected = 3 * forward_flops_per_token(model) * tokens_per_s / (4 * 2e12)
    assert throughput.mfu(tokens_per_s) == pytest.approx(expected)


def test_no_mfu_without_a_known_peak():
    throughput = Throughput.of(TXLConfig(), peak_tflops=None, device=torch.device("cpu"), ranks=2)
    assert throughput.mfu(1e5) is None
