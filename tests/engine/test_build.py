"""Model construction: partitioned under ZeRO-3 like the plain build; layer recompute."""

import pytest
import torch

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import DEEPSPEED, free_port
from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import _checkpoint_layers, build_model
from txl_dist.model import TransformerXL, TXLConfig

SETTINGS = ["model.n_token=12000", "train.seed=7"]


@pytest.mark.slow  # two DeepSpeed ranks
def test_zero3_build_is_partitioned_and_equals_the_plain_build(tmp_path):
    out_file = tmp_path / "gathered.pt"
    worker = str(REPO_ROOT / "tests" / "engine" / "zero3_build_worker.py")
    cmd = [DEEPSPEED, "--num_gpus", "2", "--master_port", str(free_port()), worker]
    proc = processes.run(
        [*cmd, str(out_file), *SETTINGS, "deepspeed.zero_optimization.stage=3"],
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    gathered = torch.load(out_file, weights_only=True)

    config = load_run_config(str(REPO_ROOT / "configs/tiny.json"), SETTINGS)
    assert config.zero_stage != 3
    plain = dict(build_model(config, ds_config={}).named_parameters())
    assert gathered.keys() == plain.keys()
    for name, weight in plain.items():
        # zero.Init keeps parameters in the training dtype (bf16): the plain fp32 build rounded
        assert gathered[name].dtype == torch.bfloat16, name
        assert torch.equal(gathered[name], weight.detach().bfloat16()), name


def test_activation_checkpointing_keeps_loss_and_gradients():
    config = TXLConfig(
        n_token=50, n_layer=2, n_head=2, d_model=8, d_head=4, d_inner=16, dropout=0.0
    )
    ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(0))
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = TransformerXL(config)
        if recompute:
            _checkpoint_layers(model)
        out = model(ids, ids, model(ids).mems)
        out.loss.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, recomputed in zip(*grads):
        torch.testing.assert_close(recomputed, plain)
