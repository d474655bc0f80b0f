"""Tokens/s and MFU of the whole job, and the peaks of known accelerators."""

import pytest
import torch

from txl_dist.engine.throughput import Throughput, peak_tflops_of
from txl_dist.model.accounting import forward_flops_per_token
from txl_dist.model.config import TXLConfig


def test_mfu_is_the_jobs_model_flops_over_the_peak_of_all_its_ranks():
    model = TXLConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_token=100)
    throughput = Throughput.of(
        model,
        peak_tflops=2.0,
        device=torch.device("cpu"),
        ranks=4,
        micro_rows=3,
        low_precision=True,
    )
    tokens_per_s = 1e5
    expected = 3 * forward_flops_per_token(model, rows=3) * tokens_per_s / (4 * 2e12)
    assert throughput.mfu(tokens_per_s) == pytest.approx(expected)


@pytest.mark.parametrize(
    "name,low_precision,peak",
    [
        ("NVIDIA H100 80GB HBM3", True, 989.0),  # SXM
        ("NVIDIA H100 PCIe", True, 756.0),  # not the SXM card's peak
        ("NVIDIA L40S", True, 362.0),  # not the L40's
        ("NVIDIA H100 80GB HBM3", False, 67.0),  # an fp32 run against the fp32 peak
        ("NVIDIA H100 PCIe 96GB", True, None),  # unknown names get no guess
    ],
)
def test_peaks_match_exact_device_names_and_the_runs_precision(name, low_precision, peak):
    assert peak_tflops_of(name, low_precision) == peak


def test_no_mfu_without_a_known_peak():
    throughput = Throughput.of(
        TXLConfig(),
        peak_tflops=None,
        device=torch.device("cpu"),
        ranks=2,
        micro_rows=1,
        low_precision=True,
    )
    assert throughput.mfu(1e5) is None
