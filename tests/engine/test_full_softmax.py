"""A plain softmax (no cutoffs, div_val 1: the character-level models) under every ZeRO stage."""

import math

import pytest
import torch

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import DEEPSPEED, free_port
from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import build_model

# The tiny model with enwik8's vocabulary size and a full softmax, in fp32 (bf16 is slow here),
# without dropout so that every stage and the plain model compute the same.
SETTINGS = [
    "model.dropout=0",
    "model.n_token=204",
    "model.cutoffs=[]",
    "model.div_val=1",
    "model.tie_projs=[]",
    "train.seed=5",
    "deepspeed.bf16.enabled=false",
]


@pytest.mark.slow  # four DeepSpeed engines on 2 ranks: 97 s on the loaded 2 cores
def test_full_softmax_trains_alike_under_every_zero_stage(tmp_path):
    out_file = tmp_path / "losses.pt"
    worker = str(REPO_ROOT / "tests" / "engine" / "full_softmax_worker.py")
    cmd = [DEEPSPEED, "--num_gpus", "2", "--master_port", str(free_port()), worker]
    proc = processes.run([*cmd, str(out_file), *SETTINGS], timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_stage = torch.load(out_file, weights_only=True)  # stage -> [ranks, steps]

    # The first step's loss is the plain model's on rank 0's rows (as the worker cuts them).
    config = load_run_config(str(REPO_ROOT / "configs/tiny.json"), SETTINGS)
    model = build_model(config, ds_config={}).eval()
    ids = torch.randperm(204, generator=torch.Generator().manual_seed(0)).repeat(2)[: 4 * 65]
    ids = ids.view(4, 65)
    with torch.no_grad():
        plain = model(ids[:, :-1], ids[:, 1:]).loss.mean().item()
    assert plain == pytest.approx(
        math.log(204), rel=0.05
    )  # untrained: about uniform over 204 tokens
    for stage, losses in by_stage.items():
        torch.testing.assert_close(losses, by_stage[0], rtol=1e-5, atol=1e-5, msg=f"stage {stage}")
        assert losses[0, 0].item() == pytest.approx(plain, rel=1e-5), stage
        assert (losses[:, -1] < losses[:, 0]).all(), stage  # the updates reached the softmax
