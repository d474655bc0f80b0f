"""launch/pretrain.py that also saves every parameter's optimizer state as the engine holds it.

Same arguments and TXL_DUMP_DIR; rank 0 writes `start_step{N}.pt` when the loop of a resumed run
is about to start (what was loaded) and `end_step{N}.pt` when the loop returns. Each holds, per
parameter name, the full fp32 master weight and Adam moments, gathered with DeepSpeed's
safe_get_full_* (collectives under ZeRO-3: every rank takes part).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

from txl_dist.cli import pretrain
from txl_dist.engine import train

STATES = ("exp_avg", "exp_avg_sq")


def optimizer_state(engine) -> dict[str, dict[str, torch.Tensor]]:
    state = {}
    for name, param in engine.module.named_parameters():
        full = {key: safe_get_full_optimizer_state(param, key) for key in STATES}
        state[name] = {"fp32": safe_get_full_fp32_param(param), **full}
    return state


def dump(trainer: train.Trainer, when: str) -> None:
    state = optimizer_state(trainer.engine)
    if dist.get_rank() == 0:
        path = os.path.join(os.environ["TXL_DUMP_DIR"], f"{when}_step{trainer.step}.pt")
        torch.save({name: {k: v.clone() for k, v in s.items()} for name, s in state.items()}, path)


def run_and_dump(trainer: train.Trainer, run=train.Trainer.run):
    if trainer.step > 0:  # a fresh optimizer has no moments yet
        dump(trainer, "start")
    stopped = run(trainer)
    dump(trainer, "end")
    return stopped


if __name__ == "__main__":
    train.Trainer.run = run_and_dump
    pretrain.main()
