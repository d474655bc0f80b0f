import json
import os

import pytest
import torch

from txl_dist.engine.metrics import (
    Metrics,
    Throughput,
    peak_tflops_of,
    train_line,
    wandb_prefix,
)
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


def test_log_lines_show_bpc_for_char_level_records_and_ppl_for_word_level_ones():
    timing = dict(
        step=7, lr=1e-3, tokens_per_s=100.0, tokens_seen=4096, step_time_s=0.5, data_wait_s=0.0
    )
    char = dict(loss=0.7, bpc=1.0099, memory_gib=1.0, **timing)
    word = dict(loss=3.0, ppl=20.0855, memory_gib=1.0, **timing)
    assert "| bpc    1.0099 |" in train_line(char) and "ppl" not in train_line(char)
    assert "| ppl     20.09 |" in train_line(word) and "bpc" not in train_line(word)
    assert "| seen/rank 4,096 |" in train_line(word)  # rank 0's count, every rank's alike
    mixed = dict(word, mix_tokens={"man": 14_336, "wiki": 6_144})  # drawn by all ranks
    assert train_line(mixed).endswith("| mix, all ranks: man 14,336 (70.0%) wiki 6,144 (30.0%)")


def test_wandb_groups_training_evaluation_and_event_records():
    assert wandb_prefix(dict(step=3, loss=1.0)) == "train/"
    assert wandb_prefix(dict(step=3, split="valid", corpus="wiki")) == "valid/wiki/"
    assert wandb_prefix(dict(step=3, event="straggler", rank=1)) == "straggler/"


def test_metrics_are_never_appended_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, tmp_path / "metrics.jsonl")
    metrics = Metrics(str(tmp_path), enabled=True, run={"run_id": "r", "restart": 0})
    metrics.log({"step": 1, "loss": 2.0})
    assert victim.read_text() == "precious\n"
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["loss"] for row in rows] == [2.0]
