"""Under ZeRO-3 the model is built partitioned, with the same initial weights as a plain build."""

import torch

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import DEEPSPEED, free_port
from txl_dist.config import load_run_config
from txl_dist.engine.train import build_model

SETTINGS = ["model.n_token=12000", "train.seed=7"]


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
