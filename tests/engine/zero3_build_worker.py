"""Run by test_build.py on 2 ranks: build the tiny model partitioned, gather it, save it.

deepspeed --num_gpus 2 tests/engine/zero3_build_worker.py OUT_FILE --set KEY=VALUE ...
"""

import sys

import deepspeed
import torch

from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import build_model
from txl_dist.engine.deepspeed_setup import deepspeed_config
from txl_dist.process.dist import end_distributed, init_distributed, world_from_env

if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if not arg.startswith("--local_rank")]  # the launcher's
    out_file, overrides = args[0], args[1:]
    config = load_run_config("configs/tiny.json", overrides)
    world = world_from_env()
    init_distributed(world)
    plan = config.plan(world.world_size)
    model = build_model(config, deepspeed_config(config, plan, load_universal=False))
    weights = {}
    for name, param in model.named_parameters():
        assert param.numel() == 0, f"{name} is whole on rank {world.rank}"  # partitioned
        with deepspeed.zero.GatheredParameters([param]):
            weights[name] = param.detach().clone()
    if world.is_main:
        torch.save(weights, out_file)
    end_distributed()
