"""What a run is made of, assembled in one place from its `Run` (engine.start): process group,
watchdog, model and DeepSpeed engine, streams, checkpoint parts, resume, metrics, run files and
wandb, handed to a Trainer, which only runs.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import uuid

import torch

from txl_dist.engine import checkpoint
from txl_dist.engine.build import build_model, wrap_layers
from txl_dist.engine.checkpoint import Checkpointer, CheckpointPart, RunState
from txl_dist.engine.checkpoint.parts import SeenTokens
from txl_dist.engine.checkpoint.parts.registry import checkpoint_parts
from txl_dist.engine.data import open_streams, open_training_streams, training_tokenizer
from txl_dist.engine.deepspeed_setup import deepspeed_config, deepspeed_engine
from txl_dist.engine.health.monitor import Health
from txl_dist.engine.health.record import SpikeRecord, SpikesPart
from txl_dist.engine.health.spikes import SpikeDetector
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics
from txl_dist.engine.start import Run
from txl_dist.engine.train import Trainer
from txl_dist.evaluation.split import SplitEvaluator
from txl_dist.files import open_new
from txl_dist.process.dist import init_distributed
from txl_dist.process.signals import StopRequest
from txl_dist.process.watchdog import Watchdog

log = logging.getLogger(__name__)


def build_trainer(run: Run) -> Trainer:
    """A Trainer for this rank of `run`: resumed from its point if it has one, else with the
    weights of its init source if it has one."""
    device = init_distributed(run.world, run.config.train.dist_timeout_s)
    watchdog = Watchdog.for_run(run.config.train, run.world.rank, run.world.world_size)
    with watchdog.phase("start", run.start_step):
        trainer = _assemble_trainer(run, device, watchdog)
        # Start-up leaves hundreds of thousands of Python objects (torch, DeepSpeed, the data
        # pipeline), which each full garbage collection during training would walk again, in
        # the middle of a step: collect once now and exempt the survivors from later ones.
        gc.collect()
        gc.freeze()
    return trainer


def _assemble_trainer(run: Run, device: torch.device, watchdog: Watchdog) -> Trainer:
    config, world, plan, point = run.config, run.world, run.plan, run.point
    os.makedirs(config.train.out_dir, exist_ok=True)
    universal = checkpoint.needs_universal(point, world.world_size, config.zero_stage)
    engine, scheduler = _engine(run, universal)
    streams = open_training_streams(config, world, rows=plan.rows_per_rank)
    memory = MemoryBank(plan.accumulation)
    state, seen = RunState(run_id=uuid.uuid4().hex[:12]), SeenTokens()
    tokenizer = training_tokenizer(config, streams)
    parts = checkpoint_parts(
        config, world, plan, device, engine, streams, memory, state, seen, tokenizer
    )
    spikes = SpikeRecord(SpikeDetector(config.spikes))
    parts.append(SpikesPart(spikes, state))
    if point is not None:
        _restore(run, universal, parts, state, streams, watchdog)
    metrics = _metrics(run, state)
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
        evaluate_split=SplitEvaluator(engine, config, world, plan, device, watchdog, open_streams),
        checkpoints=_checkpointer(run, parts, streams, state),
        state=state,
        seen=seen,
        plan=plan,
        health=Health.of(
            config, world, device, engine, scheduler, memory, metrics, spikes, plan.precision
        ),
    )
    trainer.announce_job()
    metrics.start_wandb(config.logging.wandb, config.train.out_dir, config.to_dict(), state.run_id)
    return trainer


def _engine(run: Run, universal: bool):
    """The model with its first weights and layers as train asks, in DeepSpeed's engine
    (engine, scheduler); `universal`: the checkpoint loads as DeepSpeed's universal one."""
    config, source = run.config, run.source
    ds_config = deepspeed_config(config, run.plan, universal)
    model = build_model(config, ds_config, source)
    if source is not None and run.world.is_main:
        log.info(
            f"initialized from {source.describe()} (train.init_from): its weights, a fresh "
            "optimizer, schedule and data position"
        )
    wrap_layers(model, config.train)
    return deepspeed_engine(model, config, ds_config)


def _restore(
    run: Run,
    universal: bool,
    parts: list[CheckpointPart],
    state: RunState,
    streams,
    watchdog: Watchdog,
) -> None:
    """Load `run`'s resume point into the parts, once it is checked to fit this run."""
    point = run.point
    with watchdog.phase("checkpoint load", point.client.step):
        manifest = streams.manifest
        checkpoint.check_resumable(
            point, run.config.train.global_rows, manifest.vocab_sha256, manifest.eos_token
        )
        checkpoint.restore(point, universal, parts, state, run.world)


def _metrics(run: Run, state: RunState) -> Metrics:
    """The run's metrics, and its config.json written (rank 0)."""
    config, out_dir = run.config, run.config.train.out_dir
    # Every metrics row says which run and which start of it wrote it: txl-report draws one run.
    metrics = Metrics(
        out_dir, run.world.is_main, run=dict(run_id=state.run_id, restart=state.restarts)
    )
    if run.world.is_main:
        with open_new(os.path.join(out_dir, "config.json")) as f:  # never through a link
            json.dump(config.public_dict(), f, indent=2)
    return metrics


def _checkpointer(run: Run, parts: list[CheckpointPart], streams, state: RunState):
    """The run's checkpointer: its parts and the facts every record of it carries."""
    config, world, point, source = run.config, run.world, run.point, run.source
    init_note = source.describe() if source else point.client.init_from if point else None
    facts = checkpoint.record_facts(
        config, world, run.plan.rows_per_rank, streams, state.run_id, init_note
    )
    return Checkpointer.for_run(parts, facts, config, world, point.client.step if point else None)
