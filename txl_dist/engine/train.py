"""The training loop: streams -> micro-batch slots with memories -> DeepSpeed -> logs, evals, saves.

    deepspeed [--num_gpus N] launch/pretrain.py --config C [--set section.key=value ...]
        [--resume auto|PATH]

Also runs under torchrun, srun and plain python. Each global step takes one batch of
rows_per_rank stream rows per rank, split into `accum` micro-batch slots of `micro` rows; slot s
keeps its own memory, so every row's memory is the text that precedes it in its stream.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid

import deepspeed
import torch
import torch.distributed as dist

from data_pipeline.shards import manifest_url
from data_pipeline.streams import TokenStreams
from txl_dist.config import ConfigError, RunConfig, load_run_config
from txl_dist.engine import checkpoint, preflight, run_dir
from txl_dist.engine.dist import World, init_distributed, world_from_env
from txl_dist.engine.evaluate import EvalResult, evaluate
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import (
    Metrics,
    device_peak_tflops,
    eval_line,
    memory_gib,
    safe_exp,
    train_line,
)
from txl_dist.engine.schedule import lr_multiplier
from txl_dist.engine.signals import StopRequest
from txl_dist.model import TransformerXL
from txl_dist.model.accounting import forward_flops_per_token


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a non-finite loss."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pretrain", description="Pretrain Transformer-XL.")
    parser.add_argument("--config", required=True, help="run config JSON (path or URL)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (JSON-parsed), e.g. --set train.max_steps=100",
    )
    parser.add_argument(
        "--resume", default=None, help="auto (the run's latest) or a checkpoint path"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh even if train.out_dir holds another run: move that run aside to "
        "OUT_DIR.old-TIME (nothing is deleted)",
    )
    parser.add_argument(
        "--stop-file",
        default=None,
        metavar="PATH",
        help="after an early stop (stop signal or train.max_wallclock) has checkpointed, rank 0 "
        "writes the step and reason here as JSON; batch scripts requeue the job on it",
    )
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed
    return parser.parse_args(argv)


def build_optimizer(model: torch.nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    o = config.optim
    kwargs = dict(lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
    if o.name == "adam":
        return torch.optim.Adam(model.parameters(), **kwargs)
    if o.name == "adamw":
        return torch.optim.AdamW(model.parameters(), **kwargs)
    from deepspeed.ops.lamb import FusedLamb  # needs a GPU build of DeepSpeed's ops

    return FusedLamb(model.parameters(), **kwargs)


def build_model(config: RunConfig, ds_config: dict) -> TransformerXL:
    """The model with its initial weights from train.seed, the same on every rank and stage.

    Under ZeRO-3 it is built inside `deepspeed.zero.Init`: each module is partitioned as soon
    as it exists and initialised through a gather, so no rank ever holds the whole model.
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
    model.init_weights(gathered)
    return model


def deepspeed_config(config: RunConfig, micro: int, accum: int, load_universal: bool) -> dict:
    ds = json.loads(json.dumps(config.deepspeed))  # a copy DeepSpeed may mutate
    ds.update(
        train_batch_size=config.train.global_rows,
        train_micro_batch_size_per_gpu=micro,
        gradient_accumulation_steps=accum,
    )
    ds.setdefault("steps_per_print", 10**9)  # we log ourselves
    if load_universal:
        ds.setdefault("checkpoint", {})["load_universal"] = True
    return ds


class Trainer:
    """One training run on this rank."""

    def __init__(self, config: RunConfig, world: World, micro: int, accum: int, resume: str | None):
        self.config, self.world, self.micro, self.accum = config, world, micro, accum
        self.out_dir = config.train.out_dir
        self.ckpt_dir = os.path.join(self.out_dir, "checkpoints")
        self.rows_per_rank = micro * accum
        self.resume_point = checkpoint.find_resume_point(resume, self.out_dir)
        self.device = init_distributed(world, config.train.dist_timeout_s)
        os.makedirs(self.out_dir, exist_ok=True)

        universal = self._needs_universal()
        ds_config = deepspeed_config(config, micro, accum, universal)
        model = build_model(config, ds_config)
        if config.train.activation_checkpointing:
            _checkpoint_layers(model)
        optimizer = build_optimizer(model, config)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_multiplier(config.optim, config.train.max_steps)
        )
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config
        )
        self.streams = self._streams(config.data.train_split, config.model.tgt_len, tail=False)
        self.memory = MemoryBank(accum)
        self.stop = StopRequest(config.train.max_wallclock)
        self.step, self.nonfinite_in_a_row, self.skipped_steps = 0, 0, 0
        self.run_id = uuid.uuid4().hex[:12]
        self.requeues, self.restarts = 0, 0
        if self.resume_point is not None:
            self._resume(universal)
        # Every row says which run and which start of it wrote it: txl-report draws one run.
        run = dict(run_id=self.run_id, restart=self.restarts)
        self.metrics = Metrics(self.out_dir, enabled=world.is_main, run=run)
        self._save_effective_config()
        self._announce_job()
        self.metrics.start_wandb(config.logging.wandb, self.out_dir, config.to_dict(), self.run_id)
        peak = config.train.peak_tflops or device_peak_tflops(self.device)
        self.peak_flops = peak * 1e12 if peak else None
        self.train_flops_per_token = 3 * forward_flops_per_token(config.model)

    # ---- setup helpers ----

    def _streams(
        self, split: str, tgt_len: int, tail: bool, rows: int | None = None
    ) -> TokenStreams:
        data = self.config.data
        return TokenStreams(
            manifest_url(data.path, split),
            rows_per_rank=rows or self.rows_per_rank,
            tgt_len=tgt_len,
            rank=self.world.rank,
            world_size=self.world.world_size,
            seed=self.config.train.seed,
            order=data.order,
            tail=tail,
            expected_vocab_size=self.config.model.n_token,
            storage_options=data.storage_options,
        )

    def _needs_universal(self) -> bool:
        return checkpoint.needs_universal(
            self.resume_point, self.world.world_size, self.config.zero_stage
        )

    def _resume(self, universal: bool) -> None:
        point = self.resume_point
        client = point.client
        checkpoint.check_resumable(
            point, self.config.train.global_rows, self.streams.manifest.vocab_sha256
        )
        tag = checkpoint.convert_to_universal(point) if universal else point.tag
        load_path, _ = self.engine.load_checkpoint(point.directory, tag=tag)
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {point.directory}/{tag}")
        self.step = client.step
        self.streams.load_state_dict(client.stream)
        self.run_id = client.run_id or self.run_id
        self.restarts = client.restarts + 1
        job = os.environ.get("SLURM_JOB_ID")
        self.requeues = client.requeues + int(job is not None and job == client.slurm_job_id)
        rows, rng = checkpoint.load_memories(point, self.rows_per_rank, self.world.rank)
        self.memory.load_rows(rows, self.device)
        if rng is not None:
            checkpoint.set_rng_state(rng)
        else:
            torch.manual_seed(self.config.train.seed * 1000 + self.world.rank + self.step)
        if self.world.is_main:
            note = "optimizer via universal checkpoint" if universal else "exact"
            if client.world_size != self.world.world_size:
                note += "; dropout RNG re-seeded for the new world size"
            print(
                f"[txl-dist] resumed {point.tag} at step {self.step} (saved on "
                f"{client.world_size} ranks, now {self.world.world_size}; {note})",
                flush=True,
            )

    def _announce_job(self) -> None:
        """Which scheduler job and how many requeues this start is, for the logs."""
        job = os.environ.get("SLURM_JOB_ID")
        where = (
            f"slurm job {job}, restart {os.environ.get('SLURM_RESTART_COUNT', 0)}; " if job else ""
        )
        self._announce(
            f"{where}run {self.run_id}, restarts {self.restarts}, requeues {self.requeues}"
        )

    def _save_effective_config(self) -> None:
        if self.world.is_main:
            with open(os.path.join(self.out_dir, "config.json"), "w") as f:
                json.dump(self.config.public_dict(), f, indent=2)

    # ---- the loop ----

    def run(self) -> str | None:
        """Train to max_steps or a stop request; returns why it stopped early (None: finished)."""
        train = self.config.train
        batches = iter(self.streams)
        window = _Window()
        last_saved = self.step if self.resume_point else -1
        while self.step < train.max_steps:
            started = time.perf_counter()
            input_ids, targets = next(batches)
            fetched = time.perf_counter()
            loss = self._train_step(input_ids, targets)
            tokens = self.rows_per_rank * input_ids.size(1) * self.world.world_size
            window.add(loss, tokens, fetched - started, time.perf_counter() - started)
            self.step += 1
            if self.step % self.config.logging.log_interval == 0:
                self._log_train(window)
                window = _Window()
            if self._evaluates_now():
                self._evaluate(self.config.data.valid_split)
            stop = self.stop.agreed(self.device)
            if stop or (train.save_interval and self.step % train.save_interval == 0):
                self._save()
                last_saved = self.step
            if stop:
                self._announce(f"stopping at step {self.step}: {self.stop.reason()}")
                self._finish()
                return self.stop.reason()
        if last_saved != self.step:
            self._save()
        if self.config.data.valid_split and not self._evaluates_now():
            self._evaluate(self.config.data.valid_split)
        if self.config.data.test_split:
            self._evaluate(self.config.data.test_split)
        self._finish()
        return None

    def _evaluates_now(self) -> bool:
        interval = self.config.train.eval_interval
        return bool(self.config.data.valid_split and interval and self.step % interval == 0)

    def _train_step(self, input_ids: torch.Tensor, targets: torch.Tensor) -> float:
        """One optimizer step over all slots; returns the loss averaged over ranks."""
        if self.streams.new_epoch:
            self.memory.reset()
        self.engine.train()
        slot_losses = []
        for slot in range(self.accum):
            rows = slice(slot * self.micro, (slot + 1) * self.micro)
            out = self.engine(
                input_ids[rows].to(self.device),
                targets[rows].to(self.device),
                self.memory.get(slot),
            )
            loss = out.loss.float().mean()
            self.engine.backward(loss)
            self.engine.step()
            self.memory.set(slot, out.mems)
            slot_losses.append(loss.detach())
        loss = torch.stack(slot_losses).mean()
        dist.all_reduce(loss)
        loss = loss.item() / self.world.world_size
        self._count_nonfinite(loss)
        return loss

    def _count_nonfinite(self, loss: float) -> None:
        """DeepSpeed skips updates whose gradients are not finite; we count and bound them."""
        if math.isfinite(loss):
            self.nonfinite_in_a_row = 0
            return
        self.skipped_steps += 1
        self.nonfinite_in_a_row += 1
        if self.config.zero_stage == 0 and not self._low_precision():
            raise NonFiniteLossError(
                f"non-finite loss at step {self.step + 1} with fp32 and ZeRO stage 0, where "
                "DeepSpeed cannot skip the update; lower optim.lr or use bf16 / ZeRO >= 1"
            )
        if self.nonfinite_in_a_row >= self.config.train.max_nonfinite_steps:
            raise NonFiniteLossError(
                f"{self.nonfinite_in_a_row} consecutive steps had a non-finite loss (last: step "
                f"{self.step + 1}); lower optim.lr, raise the warm-up or check the data"
            )

    def _low_precision(self) -> bool:
        ds = self.config.deepspeed
        return any(ds.get(key, {}).get("enabled", False) for key in ("bf16", "fp16"))

    def _log_train(self, w: _Window) -> None:
        tokens_per_s = w.tokens / w.seconds
        grad_norm = self.engine.get_global_grad_norm()
        record = dict(
            step=self.step,
            loss=w.loss_sum / w.steps,
            ppl=safe_exp(w.loss_sum / w.steps),
            lr=self.scheduler.get_last_lr()[0],
            grad_norm=float(grad_norm) if grad_norm is not None else None,
            loss_scale=getattr(self.engine.optimizer, "cur_scale", None)
            if self.config.deepspeed.get("fp16", {}).get("enabled")
            else None,
            tokens_per_s=tokens_per_s,
            step_time_s=w.seconds / w.steps,
            data_wait_s=w.data_wait / w.steps,
            mfu=self.train_flops_per_token
            * tokens_per_s
            / (self.peak_flops * self.world.world_size)
            if self.peak_flops
            else None,
            memory_gib=memory_gib(self.device),
            skipped_steps=self.skipped_steps,
            epoch=self.streams.epoch,
            requeues=self.requeues,  # wandb shows at which steps the job was requeued
            slurm_job_id=_int_or_none(os.environ.get("SLURM_JOB_ID")),
        )
        self.metrics.log(record, train_line(record))

    def _evaluate(self, split: str) -> EvalResult:
        """Evaluate with the config's evaluation lengths, then restore the training ones."""
        model = self.engine.module
        eval_cfg = self.config.model.for_eval()
        rows = self.config.train.eval_rows or self.config.train.global_rows
        if rows % self.world.world_size:
            raise ConfigError(
                f"train.eval_rows={rows} must be a multiple of the world size "
                f"{self.world.world_size}"
            )
        streams = self._streams(
            split, eval_cfg.tgt_len, tail=True, rows=rows // self.world.world_size
        )
        self.engine.eval()
        lengths = (eval_cfg.tgt_len, eval_cfg.mem_len, eval_cfg.clamp_len, eval_cfg.same_length)
        try:
            with model.lengths(*lengths):
                result = evaluate(self.engine, streams, self.device, progress=self.world.is_main)
        finally:
            streams.close()
        record = dict(
            step=self.step,
            split=split,
            loss=result.loss,
            ppl=result.ppl,
            tokens=result.tokens,
            tokens_per_s=result.tokens / max(result.seconds, 1e-9),
        )
        self.metrics.log(record, eval_line(record))
        return result

    def _save(self) -> None:
        state = checkpoint.CheckpointState(
            step=self.step,
            stream=self.streams.state_dict(),
            world_size=self.world.world_size,
            global_rows=self.config.train.global_rows,
            rows_per_rank=self.rows_per_rank,
            config=self.config.public_dict(),  # secrets never reach a checkpoint
            vocab_size=self.streams.vocab_size,
            vocab_sha256=self.streams.manifest.vocab_sha256,
            run_id=self.run_id,
            requeues=self.requeues,
            restarts=self.restarts,
            slurm_job_id=os.environ.get("SLURM_JOB_ID"),
        )
        tag = checkpoint.save(
            self.engine,
            self.ckpt_dir,
            state,
            self.memory,
            first_row=self.world.rank * self.rows_per_rank,
            keep_last=self.config.train.keep_last,
        )
        self._announce(f"saved checkpoint {os.path.join(self.ckpt_dir, tag)}")

    def _announce(self, message: str) -> None:
        if self.world.is_main:
            print(f"[txl-dist] {message}", flush=True)

    def _finish(self) -> None:
        self.streams.close()
        self.metrics.close()


class _Window:
    """Sums over the training steps since the last log line (evals and saves excluded)."""

    def __init__(self):
        self.loss_sum, self.steps, self.tokens, self.data_wait, self.seconds = 0.0, 0, 0, 0.0, 0.0

    def add(self, loss: float, tokens: int, data_wait: float, seconds: float) -> None:
        self.loss_sum += loss
        self.steps += 1
        self.tokens += tokens
        self.data_wait += data_wait
        self.seconds += seconds


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value else None


def _checkpoint_layers(model: TransformerXL) -> None:
    """Recompute each decoder layer in backward instead of storing its activations."""
    from torch.utils.checkpoint import checkpoint as recompute

    for layer in model.layers:
        forward = layer.forward
        layer.forward = lambda *args, _f=forward: recompute(_f, *args, use_reentrant=False)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    world = world_from_env()
    try:
        config = load_run_config(args.config, args.set)
        micro, accum = config.batch_layout(world.world_size)
        if args.resume is None:
            run_dir.claim(config.train.out_dir, args.overwrite, world.is_main)
        elif _already_finished(args.resume, config, world):
            return
        preflight.check_before_training(config)
        trainer = Trainer(config, world, micro, accum, args.resume)
    except tuple(STARTUP_ERRORS) as err:  # one clear line from rank 0, exit 2; others quiet
        if world.is_main:
            kind = next(name for cls, name in STARTUP_ERRORS.items() if isinstance(err, cls))
            print(f"{kind}: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    stopped_early = trainer.run()
    if stopped_early and args.stop_file and world.is_main:
        _write_stop_file(args.stop_file, trainer.step, stopped_early, trainer.ckpt_dir)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# Errors found before training starts, and how their one line begins.
STARTUP_ERRORS = {
    ConfigError: "config error",
    run_dir.RunDirError: "run directory error",
    checkpoint.UnsafeCheckpointError: "checkpoint error",  # refused before anything unpickled
}


def _already_finished(resume: str, config: RunConfig, world: World) -> bool:
    """A rerun of a run that reached train.max_steps says so instead of starting ranks."""
    point = checkpoint.find_resume_point(resume, config.train.out_dir)
    if point is None or point.client.step < config.train.max_steps:
        return False
    if world.is_main:
        print(
            f"[txl-dist] run {point.client.run_id} already finished: {point.tag} reached "
            f"train.max_steps={config.train.max_steps}; raise train.max_steps to train further",
            flush=True,
        )
    return True


def _write_stop_file(path: str, step: int, reason: str, ckpt_dir: str) -> None:
    """Written only once the checkpoint is complete: its presence means "resume me".

    Created exclusively and never through a link, so a planted file or symlink is an error
    rather than a file of someone else's overwritten.
    """
    note = dict(step=step, reason=reason, checkpoints=ckpt_dir)
    if os.environ.get("SLURM_JOB_ID"):  # the batch script requeues only its own job's note
        note["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(path, flags, 0o600), "w") as f:
        json.dump(note, f)
