"""DeepSpeed's side of a run: its config from ours, the optimizer it steps, `deepspeed.initialize`
and the patches to the engine it returns (our gradient clipping, no one-rank all-reduce, the
redacted config it pickles, updates skipped on a non-finite norm).
"""

from __future__ import annotations

import functools
import importlib
import json
import sys

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.runtime import compiler

from data_pipeline import redact
from txl_dist.config.plan import DeepSpeedSection, RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.engine import overflow
from txl_dist.engine.schedule import lr_multiplier
from txl_dist.model import TXLConfig
from txl_dist.model.accounting import build_on_meta


def deepspeed_config(config: RunConfig, plan: RunPlan, load_universal: bool) -> dict:
    ds = json.loads(json.dumps(config.deepspeed))  # a copy DeepSpeed may mutate
    ds.update(
        train_batch_size=plan.global_rows,
        train_micro_batch_size_per_gpu=plan.micro_rows,
        gradient_accumulation_steps=plan.accumulation,
    )
    ds.setdefault("steps_per_print", 10**9)  # we log ourselves
    # DeepSpeed's throughput timer synchronizes the device at every forward and every step; we
    # time steps ourselves.
    ds.setdefault("timers", {}).setdefault("throughput", {}).setdefault("enabled", False)
    if config.train.fit_buckets and config.zero_stage in (1, 2):
        zero = ds.setdefault("zero_optimization", {})
        for key in ("reduce_bucket_size", "allgather_bucket_size"):
            zero.setdefault(key, fitted_bucket(config.model))
    if config.train.norm_overflow_check:
        overflow.deepspeed_section(ds)
    if load_universal:
        ds.setdefault("checkpoint", {})["load_universal"] = True
    return ds


# DeepSpeed's reduce_bucket_size and allgather_bucket_size when a config sets none (elements).
DEEPSPEED_BUCKET = 500_000_000


def fitted_bucket(model: TXLConfig) -> int:
    """Elements of a bucket that holds the largest gradient whole, at most DeepSpeed's default
    (a larger gradient is reduced from its own buffer); even, as all-gather buckets must be."""
    largest = max(p.numel() for p in build_on_meta(model).parameters())
    return min(largest + largest % 2, DEEPSPEED_BUCKET)


def deepspeed_engine(model: torch.nn.Module, config: RunConfig, ds_config: dict):
    """The run's DeepSpeed engine over `model` and its learning-rate scheduler: the config's
    optimizer, the multipliers of engine.schedule (engine, scheduler)."""
    optimizer = build_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_multiplier(config.optim, config.train.max_steps)
    )
    return initialize_engine(model, optimizer, scheduler, ds_config)


def initialize_engine(model: torch.nn.Module, optimizer, scheduler, ds_config: dict):
    """deepspeed.initialize -> (engine, scheduler), less the work DeepSpeed's own step adds
    where it steps our optimizer itself (fp32, ZeRO-0).

    There its gradient clipping is a Python loop over the parameters that also all-reduces the
    norm over data-parallel ranks, whose gradients are already all-reduced and equal: torch's
    foreach clipping computes the same scale in one pass (a tiny-config step 1.3 ms shorter).
    On one rank its backward would also copy every gradient into a flat buffer, all-reduce it
    alone and copy it back. In bf16 without DeepSpeed's own overflow check, an update whose
    gradient norm is not finite is skipped (engine.overflow).

    DeepSpeed pickles its raw config into every checkpoint it saves (`ds_config`), so once it
    has set up from it (a comet or monitor key included), the engine keeps the redacted copy.
    """
    import_muon_eager()
    engine, _, _, scheduler = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config
    )
    engine.config = redact(engine.config)
    overflow.skip_on_nonfinite_norm(engine)
    if engine.optimizer is optimizer:
        engine.clip_fp32_gradients = functools.partial(
            torch.nn.utils.clip_grad_norm_,
            list(model.parameters()),
            DeepSpeedSection(ds_config).gradient_clipping,
            foreach=True,
        )
        if engine.dp_world_size == 1:
            engine.enable_backward_allreduce = False
    return engine, scheduler


MUON = "deepspeed.runtime.zero.muon.muon_optimizer"  # it imports original_muon


def import_muon_eager() -> None:
    """Import DeepSpeed's Muon with its functions left uncompiled, unless imported already.

    DeepSpeed's ZeRO check and its ZeRO and bf16 optimizers import Muon (to ask whether the
    optimizer is Muon, or before a loop that would update Muon's parameters), and decorating
    its functions with torch.compile loads torch's inductor back end: ~1.2 s of CPU at every
    rank's start. Our optimizer is the one build_optimizer made, never Muon, so none of those
    functions runs; were one to, it would compute the same, eagerly.
    """
    if MUON in sys.modules:
        return
    decorator = compiler.compile
    compiler.compile = lambda: lambda function: function
    try:
        importlib.import_module(MUON)
    finally:
        compiler.compile = decorator


# Devices with torch's fused Adam kernels. The fused step updates each tensor in one pass: the
# unfused one allocates two temporaries the size of the optimizer's whole partition (3.4 GB per
# rank for lm1b_large on 2 ranks, which pushed it past 24 GB) and is ~9x slower on CPU.
FUSED_ADAM_DEVICES = ("cpu", "cuda")


def build_optimizer(model: torch.nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    o = config.optim
    kwargs = dict(lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
    adam = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}.get(o.name)
    if adam is not None:
        fused = get_accelerator().device_name() in FUSED_ADAM_DEVICES or None
        return adam(model.parameters(), fused=fused, **kwargs)
    from deepspeed.ops.lamb import FusedLamb  # needs a GPU build of DeepSpeed's ops

    return FusedLamb(model.parameters(), **kwargs)
