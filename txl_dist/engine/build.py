"""Everything with side effects before the loop: process group, model, DeepSpeed engine, streams,
resume, run files and wandb. `build_trainer` hands the parts to a Trainer, which only runs.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import uuid

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator

from data_pipeline import (
    MixedStreams,
    TokenStreams,
    redact,
)
from txl_dist.config.plan import DeepSpeedSection, RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.engine import checkpoint, overflow
from txl_dist.engine.checkpoint import Checkpointer, CheckpointPart, ResumePoint, RunState
from txl_dist.engine.checkpoint.parts import (
    DeepSpeedPart,
    MemoryPart,
    RunPart,
    SeenTokens,
    StreamPart,
    TokenizerPart,
    TokensPart,
)
from txl_dist.engine.data import open_streams, open_training_streams, training_tokenizer
from txl_dist.engine.evaluate import EvalResult, evaluate, token_weighted
from txl_dist.engine.graphs import graph_layers
from txl_dist.engine.health.monitor import Health
from txl_dist.engine.health.record import SpikeRecord, SpikesPart
from txl_dist.engine.health.spikes import SpikeDetector
from txl_dist.engine.init_from import InitSource, copy_weights, source_model
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics
from txl_dist.engine.schedule import lr_multiplier
from txl_dist.engine.train import Trainer
from txl_dist.files import open_new
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.accounting import build_on_meta
from txl_dist.process.dist import World, init_distributed
from txl_dist.process.signals import StopRequest
from txl_dist.process.watchdog import Watchdog

log = logging.getLogger(__name__)


def build_trainer(
    config: RunConfig,
    world: World,
    plan: RunPlan,
    point: ResumePoint | None,
    source: InitSource | None = None,
) -> Trainer:
    """A Trainer for this rank with `plan` (config.plan(world size), checked before any process
    group), resumed from `point` (checkpoint.find_resume_point) if given, else with the weights
    of `source` (train.init_from, init_from.checked_source) if given."""
    device = init_distributed(world, config.train.dist_timeout_s)
    watchdog = Watchdog.for_run(config.train, world.rank, world.world_size)
    with watchdog.phase("start", point.client.step if point else 0):
        trainer = _assemble_trainer(config, world, device, watchdog, plan, point, source)
        # Start-up leaves hundreds of thousands of Python objects (torch, DeepSpeed, the data
        # pipeline), which each full garbage collection during training would walk again, in
        # the middle of a step: collect once now and exempt the survivors from later ones.
        gc.collect()
        gc.freeze()
    return trainer


def _assemble_trainer(
    config: RunConfig,
    world: World,
    device: torch.device,
    watchdog: Watchdog,
    plan: RunPlan,
    point: ResumePoint | None,
    source: InitSource | None = None,
) -> Trainer:
    out_dir = config.train.out_dir
    os.makedirs(out_dir, exist_ok=True)
    universal = checkpoint.needs_universal(point, world.world_size, config.zero_stage)
    ds_config = deepspeed_config(config, plan, universal)
    source = source if point is None else None  # a resume's weights are its checkpoint's
    model = build_model(config, ds_config, source)
    if source is not None and world.is_main:
        log.info(
            f"initialized from {source.describe()} (train.init_from): its weights, a fresh "
            "optimizer, schedule and data position"
        )
    init_note = source.describe() if source else point.client.init_from if point else None
    if config.train.activation_checkpointing:
        _checkpoint_layers(model)
    if config.train.compile:
        compile_layers(model)
    if config.train.cuda_graphs:  # preflight made sure the devices are CUDA's
        graph_layers(model)
    optimizer = build_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_multiplier(config.optim, config.train.max_steps)
    )
    engine, scheduler = initialize_engine(model, optimizer, scheduler, ds_config)
    streams = open_training_streams(config, world, rows=plan.rows_per_rank)
    memory = MemoryBank(plan.accumulation)
    state, seen = RunState(run_id=uuid.uuid4().hex[:12]), SeenTokens()
    parts = checkpoint_parts(config, world, device, engine, streams, memory, state, plan)
    per_step = plan.rows_per_rank * config.model.tgt_len
    parts.append(TokensPart(seen, world.rank, world.world_size, per_step, state))
    spikes = SpikeRecord(SpikeDetector(config.spikes))
    parts.append(SpikesPart(spikes, state))
    if point is not None:
        with watchdog.phase("checkpoint load", point.client.step):
            manifest = streams.manifest
            checkpoint.check_resumable(
                point, config.train.global_rows, manifest.vocab_sha256, manifest.eos_token
            )
            checkpoint.restore(point, universal, parts, state, world)
    # Every metrics row says which run and which start of it wrote it: txl-report draws one run.
    metrics = Metrics(out_dir, world.is_main, run=dict(run_id=state.run_id, restart=state.restarts))
    if world.is_main:
        with open_new(os.path.join(out_dir, "config.json")) as f:  # never through a link
            json.dump(config.public_dict(), f, indent=2)
    trainer = Trainer(
        config=config,
        world=world,
        device=device,
        engine=engine,
        scheduler=scheduler,
        streams=streams,
        memory=memory,
        metrics=metrics,
        stop=StopRequest(config.train.max_wallclock, config.train.stop_check_s),
        watchdog=watchdog,
        evaluate_split=SplitEvaluator(engine, config, world, plan, device, watchdog),
        checkpoints=Checkpointer.for_run(
            parts,
            checkpoint.record_facts(
                config, world, plan.rows_per_rank, streams, state.run_id, init_note
            ),
            config,
            world,
            point.client.step if point else None,
        ),
        state=state,
        seen=seen,
        plan=plan,
        health=Health.of(
            config, world, device, engine, scheduler, memory, metrics, spikes, plan.precision
        ),
    )
    trainer.announce_job()
    metrics.start_wandb(config.logging.wandb, out_dir, config.to_dict(), state.run_id)
    return trainer


def checkpoint_parts(
    config: RunConfig,
    world: World,
    device: torch.device,
    engine,
    streams: TokenStreams | MixedStreams,
    memory: MemoryBank,
    state: RunState,
    plan: RunPlan,
) -> list[CheckpointPart]:
    """What every checkpoint of the run holds, in the order a resume loads them (the RNG
    states, with the memories, after anything that could draw from them)."""
    parts: list[CheckpointPart] = [
        DeepSpeedPart(engine),
        RunPart(state),
        StreamPart(streams),
        MemoryPart(memory, world.rank, plan.rows_per_rank, device, config.train.seed, state),
    ]
    tokenizer = training_tokenizer(config, streams)
    if tokenizer is not None:
        parts.append(TokenizerPart(tokenizer))
    return parts


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


def build_model(
    config: RunConfig, ds_config: dict, source: InitSource | None = None
) -> TransformerXL:
    """The model with its initial weights from train.seed, or `source`'s (train.init_from),
    the same on every rank and stage.

    Under ZeRO-3 it is built inside `deepspeed.zero.Init`: each module is partitioned as soon
    as it exists and initialised through a gather, so no rank ever holds the whole model. A
    source's weights are read whole in fp32 on the CPU, then copied in: on every rank, or under
    ZeRO-3 on rank 0 alone, the gathers' modifier, whose values they hand to the others.
    """
    if config.zero_stage == 3:
        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = TransformerXL(config.model, init_weights=False)
        # Parameters appended to a ParameterList after its __init__ (the adaptive projections)
        # escape the context; partition them too.
        deepspeed.zero.Init(module=model, config_dict_or_path=ds_config)

        def gathered(params):
            return deepspeed.zero.GatheredParameters(params, modifier_rank=0)
    else:
        model, gathered = TransformerXL(config.model, init_weights=False), None
    torch.manual_seed(config.train.seed)
    if source is None:
        model.init_weights(gathered)
    else:
        reads = gathered is None or torch.distributed.get_rank() == 0
        copy_weights(model, source_model(source) if reads else None, gathered)
    return model


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


class SplitEvaluator:
    """Scores a whole split with the config's evaluation lengths, distributed over the ranks;
    each batch is progress for the watchdog."""

    def __init__(
        self,
        engine,
        config: RunConfig,
        world: World,
        plan: RunPlan,
        device: torch.device,
        watchdog: Watchdog,
    ):
        self.engine, self.config, self.world, self.device = engine, config, world, device
        self.rows, self.watchdog = plan.eval_rows_per_rank, watchdog

    def __call__(self, split: str) -> EvalResult:
        """The split's result; for data.mix, each corpus's split and their token-weighted mean."""
        mix = self.config.data.mix
        if mix is None:
            return self.score(split, None)
        return token_weighted({c.name: self.score(split, c.path) for c in mix})

    def score(self, split: str, root: str | None) -> EvalResult:
        """Evaluate `split` of the dataset at `root` (data.path if None)."""
        eval_cfg = self.config.model.for_eval()
        streams = open_streams(
            self.config, self.world, split, tail=True, rows=self.rows, tgt_len=eval_cfg.tgt_len,
            root=root,
        )  # fmt: skip
        lengths = (eval_cfg.tgt_len, eval_cfg.mem_len, eval_cfg.clamp_len, eval_cfg.same_length)
        self.engine.eval()
        try:
            # Eager even under train.compile: evaluation's many memory lengths (growing by
            # eval_tgt_len up to eval_mem_len) would each compile a graph for one pass.
            with self.engine.module.lengths(*lengths), torch.compiler.set_stance("force_eager"):
                return evaluate(
                    self.engine,
                    streams,
                    self.device,
                    progress=self.world.is_main,
                    on_batch=self.watchdog.progress,
                )
        finally:
            streams.close()


def _checkpoint_layers(model: TransformerXL) -> None:
    """Recompute each decoder layer in backward instead of storing its activations."""
    from torch.utils.checkpoint import checkpoint as recompute

    for layer in model.layers:
        forward = layer.forward
        layer.forward = lambda *args, _f=forward: recompute(_f, *args, use_reentrant=False)


def compile_layers(model: TransformerXL) -> None:
    """torch.compile each decoder layer in place, so state-dict names (checkpoints) are unchanged.

    Per layer, not the whole model: the adaptive softmax's per-cluster gathers have data-dependent
    shapes that would break the graph every step. The layers share one code object, so all of
    them reuse the same few graphs: one per memory length a run sees (0 on a row's first segment,
    then mem_len; evaluation adds its own lengths and rows), each compiled once.
    """
    for layer in model.layers:
        layer.compile(dynamic=False)
