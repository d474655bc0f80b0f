"""bf16 updates whose gradients are not finite: skipped on the gradient norm, not per gradient.

DeepSpeed 0.19.8 turns `bf16.check_grad_overflow` on by default. Under ZeRO-1/2 it then tests
every gradient for inf/NaN before each update (a max, a min and their finiteness per gradient,
an all-reduce and a read of the result on the host), and tests the gradient norm as well. With
it off DeepSpeed tests neither in bf16: a NaN gradient reaches Adam and the weights become NaN.
The norm DeepSpeed computes for clipping is non-finite whenever any gradient is (it keeps such a
norm as -1), so checking that norm alone skips the same updates, in DeepSpeed's own way: the
gradients are dropped, the weights and Adam's state stay as they were and `engine.skipped_steps`
counts the update, which the loop logs and bounds.

ZeRO-0 in bf16 (DeepSpeed's unfused optimizer) and ZeRO-3 check the norm whatever the setting,
so they are left as they are.
"""

from __future__ import annotations

import warnings

import torch
from deepspeed.runtime.utils import is_invalid_grad_norm
from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer


def deepspeed_section(ds_config: dict) -> None:
    """Turn DeepSpeed's per-gradient check off in a bf16 deepspeed section (in place)."""
    bf16 = ds_config.get("bf16", {})
    if bf16.get("enabled"):
        bf16["check_grad_overflow"] = False


def skip_on_nonfinite_norm(engine) -> None:
    """Under ZeRO-1/2 in bf16 without DeepSpeed's check: an update whose gradient norm is not
    finite is skipped (one read of the norm on the host per update)."""
    optimizer = engine.optimizer
    if not isinstance(optimizer, DeepSpeedZeroOptimizer) or optimizer.check_grad_overflow:
        return
    if optimizer.dtype != torch.bfloat16:  # fp32 and fp16: DeepSpeed checks the norm itself
        return
    norm_of = optimizer.scaled_global_norm

    def scaled_global_norm(*args, **kwargs):
        norm = norm_of(*args, **kwargs)
        # DeepSpeed's step skips the update, as for an overflow, when this is set after the norm.
        optimizer.overflow = is_invalid_grad_norm(norm)
        return norm

    optimizer.scaled_global_norm = scaled_global_norm


def skipped_updates(engine) -> int:
    """Updates DeepSpeed skipped (a non-finite gradient norm, fp16's overflows): the loss of such
    a step may be finite, so the trainer's non-finite count misses them."""
    return int(getattr(engine, "skipped_steps", 0))


def step_schedule(scheduler) -> None:
    """Step the schedule DeepSpeed held back on an update it skipped: the learning rate follows
    the step count, so a run's warm-up and decay end where the config says. (When the first
    updates overflow, as fp16's loss-scale search makes them, torch warns that no optimizer step
    came first: that is the point here.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Detected call of `lr_scheduler", UserWarning)
        scheduler.step()
