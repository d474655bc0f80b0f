"""The training loop: streams -> micro-batch slots with memories -> DeepSpeed -> logs, evals, saves.

The parts come built (engine.build); the command around it is cli.pretrain. Each global step takes
one batch of rows_per_rank stream rows per rank, split into `accum` micro-batch slots of `micro`
rows; slot s keeps its own memory, so every row's memory is the text that precedes it in its
stream.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

import torch

from data_pipeline import BatchStream
from txl_dist.config.plan import RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.engine import overflow
from txl_dist.engine.checkpoint import Checkpointer, RunState
from txl_dist.engine.checkpoint.parts import SeenTokens
from txl_dist.engine.health.monitor import Health
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import LogWindow, Metrics, mix_shares, train_line
from txl_dist.engine.profiling import SnapshotOnOutOfMemory, StepProfiler
from txl_dist.engine.throughput import Throughput, memory_gib
from txl_dist.evaluation.loop import EvalResult
from txl_dist.evaluation.records import log_evaluation
from txl_dist.evaluation.scores import score
from txl_dist.model.accounting import rank_memory_bytes
from txl_dist.process.dist import World
from txl_dist.process.signals import StopRequest
from txl_dist.process.watchdog import Watchdog

log = logging.getLogger(__name__)


class Trainer:
    """One training run on this rank: gets its parts built (engine.assemble.build_trainer) and runs.

    `evaluate_split(split)` scores a split, `checkpoints` saves complete checkpoints (both
    collective); everything else is the engine, the streams and the bookkeeping around them.
    Each step, evaluation and save runs as a phase of the `watchdog`, which ends the run when
    one makes no progress in time.
    """

    def __init__(
        self,
        *,
        config: RunConfig,
        world: World,
        device: torch.device,
        engine,
        scheduler,
        streams: BatchStream,
        memory: MemoryBank,
        metrics: Metrics,
        stop: StopRequest,
        watchdog: Watchdog,
        evaluate_split: Callable[[str], EvalResult],
        checkpoints: Checkpointer,
        state: RunState,
        seen: SeenTokens,
        plan: RunPlan,
        health: Health,
    ):
        self.config, self.world, self.device = config, world, device
        self.engine, self.scheduler, self.streams, self.memory = engine, scheduler, streams, memory
        self.metrics, self.stop, self.watchdog = metrics, stop, watchdog
        self.evaluate_split, self.checkpoints = evaluate_split, checkpoints
        self.run_id, self.step = state.run_id, state.step
        self.restarts, self.requeues = state.restarts, state.requeues
        self.seen, self.plan, self.health = seen, plan, health
        self.stragglers = health.stragglers  # the command reads who was named
        self.throughput = Throughput.of(
            config.model, config.train.peak_tflops, device, world.world_size, plan.micro_rows,
            plan.low_precision,
        )  # fmt: skip
        out_dir = config.train.out_dir
        self.profiler = StepProfiler(config.train.profile_steps, out_dir, world.rank, device)
        estimate = lambda: rank_memory_bytes(  # noqa: E731  txl-inspect's bytes for one rank
            config.model, config.zero_stage, plan.world_size, plan.micro_rows, plan.dtype_bytes
        )
        self.out_of_memory = SnapshotOnOutOfMemory(out_dir, world.rank, estimate)

    def announce_job(self) -> None:
        """Which scheduler job, run and start this is, for the logs."""
        job, restart = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_RESTART_COUNT", 0)
        where = f"slurm job {job}, restart {restart}; " if job else ""
        self._announce(
            f"{where}run {self.run_id}, restarts {self.restarts}, requeues {self.requeues}"
        )

    # ---- the loop ----

    def run(self) -> str | None:
        """Train to max_steps or a stop request; returns why it stopped early (None: finished)."""
        max_steps = self.config.train.max_steps
        batches, window = iter(self.streams), LogWindow(self.device)
        self.engine.train()  # and again after each evaluation, not at every step
        warm_until = self.step + self._warm_up_steps()
        while self.step < max_steps:
            with self.watchdog.phase("step", self.step + 1, slow=self.step < warm_until):
                slow = self._train_one(batches, window)
                if self.step % self.config.logging.log_interval == 0:
                    self._log_train(window)
                    window = LogWindow(self.device)
                if self._evaluates_now():
                    self._evaluate(self.config.data.valid_split)
                # A stop at the last step is the end of the run, not an early stop to resume.
                stop = (self.stop.agreed(self.device) or bool(slow)) and self.step < max_steps
                due = self.checkpoints.due(self.step)
                if back := self.health.rolled_back(
                    self.step, stop or due or self.step == max_steps, self.checkpoints,
                    self.config.zero_stage, self.streams, self.memory,
                ):  # fmt: skip
                    (self.step, batches), window = back, LogWindow(self.device)
                    continue
                if stop or due:
                    self._save()
                if stop:
                    reason = slow or self.stop.reason()
                    self._announce(f"stopping at step {self.step}: {reason}")
                    self._wait_for_save()
                    self._finish()
                    return reason
        self._end()
        return None

    def _train_one(self, batches, window: LogWindow) -> str | None:
        """One step from `batches`, counted in `window`; why the run stops (a straggler), if."""
        self.profiler.starting(self.step + 1)
        started = time.perf_counter()
        with self.health.timed("data"):
            input_ids, targets = next(batches)
        targets = self.health.batch(targets, self.streams.vocab_size)
        fetched = time.perf_counter()
        with self.out_of_memory:
            step = lambda: self.train_step(input_ids, targets)  # noqa: E731
            loss = self.health.attempts(self.step + 1, step, self._overflow_skips)
        self.seen.tokens += input_ids.numel()
        tokens = self.plan.rows_per_rank * input_ids.size(1) * self.world.world_size
        window.add(loss, tokens, fetched - started, time.perf_counter() - started)
        slow = self.health.stepped(self.step + 1, loss, self.engine.get_global_grad_norm())
        self.step += 1
        self.profiler.done(self.step)
        return slow

    def _end(self) -> None:
        """The run's last save, evaluations and closing, at max_steps."""
        if not self.checkpoints.holds(self.step):  # not saved in the loop, nor resumed here
            self._save()
        if self.config.data.valid_split and not self._evaluates_now():
            self._evaluate(self.config.data.valid_split)
        if self.config.data.test_split:
            self._evaluate(self.config.data.test_split)
        self._wait_for_save()
        self._finish()

    def _warm_up_steps(self) -> int:
        """Steps after a start that get train.checkpoint_timeout_s: the first, and under
        train.compile one per memory length a graph is compiled for (tgt_len apart)."""
        model = self.config.model
        return 1 + (math.ceil(model.mem_len / model.tgt_len) if self.config.train.compile else 0)

    def _evaluates_now(self) -> bool:
        interval = self.config.train.eval_interval
        return bool(self.config.data.valid_split and interval and self.step % interval == 0)

    def train_step(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step over all slots; returns this rank's loss, left on the device (the
        host reads losses once per log line, not once per step)."""
        if self.streams.new_epoch:
            self.memory.reset()
        skipped_before = self._overflow_skips()
        slot_losses = []
        micro = self.plan.micro_rows
        input_ids, targets = self._pinned(input_ids), self._pinned(targets)
        for slot in range(self.plan.accumulation):
            rows = slice(slot * micro, (slot + 1) * micro)
            with self.health.timed("forward_backward"):  # its gradient reduction excluded
                out = self.engine(
                    input_ids[rows].to(self.device, non_blocking=True),
                    targets[rows].to(self.device, non_blocking=True),
                    self.memory.get(slot),
                    # Counted on the host copy: the softmax then never reads the device.
                    cluster_sizes=self.engine.module.cluster_sizes(targets[rows]),
                )
                loss = out.loss.float().mean()
                self.engine.backward(loss)
            if slot == self.plan.accumulation - 1:  # DeepSpeed updates after the last slot
                self.checkpoints.before_update()  # a background save may still read the weights
                self.health.before_update(torch.stack([*slot_losses, loss.detach()]).mean())
            with self.health.timed("optimizer"):
                self.engine.step()
            self.memory.set(slot, out.mems)
            slot_losses.append(loss.detach())
        if self._overflow_skips() > skipped_before:
            overflow.step_schedule(self.scheduler)  # held back by DeepSpeed on a skipped update
        return torch.stack(slot_losses).mean()

    def _pinned(self, batch: torch.Tensor) -> torch.Tensor:
        """The batch in page-locked memory for a GPU: copied from there without waiting for the
        device (non_blocking), where a copy from pageable memory would wait for it."""
        return batch.pin_memory() if self.device.type == "cuda" else batch

    def _overflow_skips(self) -> int:
        return overflow.skipped_updates(self.engine)

    def _log_train(self, w: LogWindow) -> None:
        tokens_per_s = w.tokens / w.seconds
        loss = w.mean_loss(self.world.world_size)
        grad_norm = self.engine.get_global_grad_norm()
        record = dict(
            step=self.step,
            loss=loss,
            **score(loss, self.streams.manifest.level),  # ppl, or bpc for char-level data
            lr=self.scheduler.get_last_lr()[0],
            grad_norm=float(grad_norm) if grad_norm is not None else None,
            loss_scale=getattr(self.engine.optimizer, "cur_scale", None)
            if self.plan.precision == "fp16"
            else None,
            tokens_per_s=tokens_per_s,
            tokens_seen=self.seen.tokens,  # rank 0's: every rank takes as many
            step_time_s=w.seconds / w.steps,
            data_wait_s=w.data_wait / w.steps,
            mfu=self.throughput.mfu(tokens_per_s),
            memory_gib=memory_gib(self.device),
            skipped_steps=max(self.health.skipped_steps(self.step), self._overflow_skips()),
            epoch=self.streams.epoch,
            mix_tokens=(mix := self.streams.mix_tokens()),  # a collective for a mix: every rank
            mix_shares=mix_shares(mix),
            transient_faults=self.health.transient,
            requeues=self.requeues,  # wandb shows at which steps the job was requeued
            slurm_job_id=int(job) if (job := os.environ.get("SLURM_JOB_ID")) else None,
        )
        self.metrics.log(record, train_line(record))

    def _evaluate(self, split: str) -> EvalResult:
        """Evaluate with the config's evaluation lengths (the training ones stay in place)."""
        with self.watchdog.phase("evaluation", self.step):
            result = self.evaluate_split(split)
        self.engine.train()
        log_evaluation(self.metrics.log, self.step, split, result, self.streams.manifest.level)
        return result

    def _save(self) -> None:
        self.health.skipped_steps(self.step)  # never save what should have ended the run
        if refused := self.health.refuses_save(self.step):  # never save a spike
            self._announce(f"not saving step {self.step}: {refused}")
            return
        with self.watchdog.phase("checkpoint save", self.step):
            path = self.checkpoints.save(self.step)
        if self.checkpoints.in_background:
            self._announce(f"saving checkpoint {path} in the background")
        else:
            self._announce(f"saved checkpoint {path}")

    def _wait_for_save(self) -> None:
        """A background save completes before the process exits."""
        with self.watchdog.phase("checkpoint save", self.step):
            self.checkpoints.wait()

    def _announce(self, message: str) -> None:
        if self.world.is_main:
            log.info(message)

    def _finish(self) -> None:
        self.profiler.close()
        with self.watchdog.phase("finish", self.step):
            self.stop.settle()
        self.watchdog.stop()
        self.streams.close()
        self.metrics.close()
