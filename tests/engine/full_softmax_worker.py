"""Run by test_full_softmax.py on 2 ranks: a full-softmax model (no cutoffs) trained 3 steps
under each ZeRO stage in turn, from the same weights on the same batches; rank 0 saves the
losses every rank saw, by stage.

deepspeed --num_gpus 2 tests/engine/full_softmax_worker.py OUT_FILE --set KEY=VALUE ...
"""

import sys

import deepspeed
import torch
import torch.distributed as dist

from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import build_model
from txl_dist.engine.deepspeed_setup import build_optimizer, deepspeed_config
from txl_dist.process.dist import end_distributed, init_distributed, world_from_env

STEPS = 3


def losses_at_stage(overrides: list[str], stage: int, rank: int) -> list[float]:
    config = load_run_config(
        "configs/tiny.json", [*overrides, f"deepspeed.zero_optimization.stage={stage}"]
    )
    plan = config.plan(dist.get_world_size())
    ds_config = deepspeed_config(config, plan, load_universal=False)
    model = build_model(config, ds_config)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=build_optimizer(model, config), config=ds_config
    )
    # Each rank its own rows, the same at every stage; every token id of the vocabulary occurs.
    ids = torch.randperm(config.model.n_token, generator=torch.Generator().manual_seed(rank))
    ids = ids.repeat(2)[: plan.micro_rows * (config.model.tgt_len + 1)].view(plan.micro_rows, -1)
    losses, mems = [], None
    for _ in range(STEPS):
        out = engine(ids[:, :-1], ids[:, 1:], mems)
        loss = out.loss.float().mean()
        engine.backward(loss)
        engine.step()
        mems = out.mems
        losses.append(loss.item())
    engine.destroy()
    return losses


if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if not arg.startswith("--local_rank")]  # the launcher's
    out_file, overrides = args[0], args[1:]
    world = world_from_env()
    init_distributed(world)
    by_stage = {}
    for stage in (0, 1, 2, 3):
        mine = torch.tensor(losses_at_stage(overrides, stage, world.rank))
        every = [torch.zeros_like(mine) for _ in range(world.world_size)]
        dist.all_gather(every, mine)
        by_stage[stage] = torch.stack(every)  # [ranks, steps]
    if world.is_main:
        torch.save(by_stage, out_file)
    end_distributed()
