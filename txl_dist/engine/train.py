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
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist

from data_pipeline import BatchStream
from txl_dist.config.plan import RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint import Checkpointer, RunState
from txl_dist.engine.checkpoint.parts import SeenTokens
from txl_dist.engine.health.guard import SpikeGuard
from txl_dist.engine.health.rerun import StepRerun
from txl_dist.engine.health.stragglers import StragglerDetector
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import (
    Metrics,
    Throughput,
    memory_gib,
    mix_shares,
    train_line,
)
from txl_dist.engine.profiling import SnapshotOnOutOfMemory, StepProfiler
from txl_dist.evaluation.loop import EvalResult
from txl_dist.evaluation.records import log_evaluation
from txl_dist.evaluation.scores import score
from txl_dist.model.accounting import rank_memory_bytes
from txl_dist.process.dist import World
from txl_dist.process.signals import StopRequest
from txl_dist.process.watchdog import Watchdog

log = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a non-finite loss."""


class Trainer:
    """One training run on this rank: gets its parts built (engine.build.build_trainer) and runs.

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
        spikes: SpikeGuard,
        reruns: StepRerun | None = None,
    ):
        self.config, self.world, self.device = config, world, device
        self.engine, self.scheduler, self.streams, self.memory = engine, scheduler, streams, memory
        self.metrics, self.stop, self.watchdog = metrics, stop, watchdog
        self.evaluate_split, self.checkpoints = evaluate_split, checkpoints
        self.run_id, self.step = state.run_id, state.step
        self.restarts, self.requeues = state.restarts, state.requeues
        self.seen, self.plan, self.spikes, self.reruns = seen, plan, spikes, reruns
        self.nonfinite, self.skipped_steps = _NonFinite(device), 0
        self.throughput = Throughput.of(
            config.model,
            config.train.peak_tflops,
            device,
            world.world_size,
            plan.micro_rows,
            plan.low_precision,
        )
        out_dir = config.train.out_dir
        self.profiler = StepProfiler(config.train.profile_steps, out_dir, world.rank, device)
        self.out_of_memory = SnapshotOnOutOfMemory(out_dir, world.rank, self._memory_estimate)
        self.stragglers = StragglerDetector.of(
            config.stragglers, world, device, engine, metrics.log
        )

    def announce_job(self) -> None:
        """Which scheduler job, run and start this is, for the logs."""
        job = os.environ.get("SLURM_JOB_ID")
        where = (
            f"slurm job {job}, restart {os.environ.get('SLURM_RESTART_COUNT', 0)}; " if job else ""
        )
        self._announce(
            f"{where}run {self.run_id}, restarts {self.restarts}, requeues {self.requeues}"
        )

    # ---- the loop ----

    def run(self) -> str | None:
        """Train to max_steps or a stop request; returns why it stopped early (None: finished)."""
        train = self.config.train
        batches = iter(self.streams)
        window = _Window(self.device)
        self.engine.train()  # and again after each evaluation, not at every step
        warm_until = self.step + self._warm_up_steps()
        while self.step < train.max_steps:
            with self.watchdog.phase("step", self.step + 1, slow=self.step < warm_until):
                self.profiler.starting(self.step + 1)
                started = time.perf_counter()
                with self.stragglers.timed("data"):
                    input_ids, targets = next(batches)
                targets = self.spikes.batch(targets, self.streams.vocab_size)
                fetched = time.perf_counter()
                with self.out_of_memory:
                    loss = self._attempts(input_ids, targets)
                self.nonfinite.add(loss)
                self.spikes.add(self.step + 1, loss, self.engine.get_global_grad_norm())
                self.seen.tokens += input_ids.numel()
                tokens = self.plan.rows_per_rank * input_ids.size(1) * self.world.world_size
                window.add(loss, tokens, fetched - started, time.perf_counter() - started)
                self.step += 1
                slow = self.stragglers.step_done(self.step)  # every interval a collective
                self.profiler.done(self.step)
                if self.step % self.config.logging.log_interval == 0:
                    self._log_train(window)
                    window = _Window(self.device)
                if self._evaluates_now():
                    self._evaluate(self.config.data.valid_split)
                # A stop at the last step is the end of the run, not an early stop to resume.
                stop = (self.stop.agreed(self.device) or bool(slow)) and self.step < train.max_steps
                saving = stop or self.checkpoints.due(self.step) or self.step == train.max_steps
                c, stage = self.checkpoints, self.config.zero_stage  # guard.py: a rollback?
                if self.spikes.due(self.step, saving) and (
                    back := self.spikes.checked(c, stage, self.streams, self.memory)
                ):
                    (self.step, batches), window = back, _Window(self.device)
                    self.nonfinite = _NonFinite(self.device)  # the rolled-back steps' are gone
                    continue
                if stop or self.checkpoints.due(self.step):
                    self._save()
                if stop:
                    reason = slow or self.stop.reason()
                    self._announce(f"stopping at step {self.step}: {reason}")
                    self._wait_for_save()
                    self._finish()
                    return reason
        if not self.checkpoints.holds(self.step):  # not saved in the loop, nor resumed here
            self._save()
        if self.config.data.valid_split and not self._evaluates_now():
            self._evaluate(self.config.data.valid_split)
        if self.config.data.test_split:
            self._evaluate(self.config.data.test_split)
        self._wait_for_save()
        self._finish()
        return None

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
            with self.stragglers.timed("forward_backward"):  # its gradient reduction excluded
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
            with self.stragglers.timed("optimizer"):
                self.engine.step()
            self.memory.set(slot, out.mems)
            slot_losses.append(loss.detach())
        if self._overflow_skips() > skipped_before:
            # DeepSpeed holds the schedule back on an update it skipped; the learning rate
            # follows the step count, so a run's warm-up and decay end where the config says.
            # (When the first updates overflow, as fp16's loss-scale search makes them, torch
            # warns that no optimizer step came first: that is the point here.)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler", UserWarning)
                self.scheduler.step()
        return torch.stack(slot_losses).mean()

    def _attempts(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """train_step, again where its update was skipped and spikes.rerun (rerun.py)."""
        step = lambda: self.train_step(input_ids, targets)  # noqa: E731
        return self.reruns.run(self.step + 1, step, self._overflow_skips) if self.reruns else step()

    def _pinned(self, batch: torch.Tensor) -> torch.Tensor:
        """The batch in page-locked memory for a GPU: copied from there without waiting for the
        device (non_blocking), where a copy from pageable memory would wait for it."""
        return batch.pin_memory() if self.device.type == "cuda" else batch

    def _check_nonfinite(self) -> None:
        """DeepSpeed skips updates whose gradients are not finite; we count and bound them.

        Each step's loss stays on the device and is looked at here, at log lines and before
        saves: a run that must end does so at the next of those, before it saves anything.
        """
        longest, self.skipped_steps = self.nonfinite.read()
        if self.skipped_steps and self.config.zero_stage == 0 and not self.plan.low_precision:
            raise NonFiniteLossError(
                f"non-finite loss by step {self.step} with fp32 and ZeRO stage 0, where "
                "DeepSpeed cannot skip the update; lower optim.lr or use bf16 / ZeRO >= 1"
            )
        if longest >= self.config.train.max_nonfinite_steps:
            raise NonFiniteLossError(
                f"{longest} consecutive steps had a non-finite loss (by step {self.step}); "
                "lower optim.lr, raise the warm-up or check the data"
            )

    def _memory_estimate(self) -> float:
        """txl-inspect's bytes for one rank of this run."""
        config, plan = self.config, self.plan
        return rank_memory_bytes(
            config.model, config.zero_stage, plan.world_size, plan.micro_rows, plan.dtype_bytes
        )

    def _overflow_skips(self) -> int:
        """Updates DeepSpeed skipped for overflowing gradients (fp16 loss scaling): a step whose
        loss is finite, so the non-finite count misses it."""
        return int(getattr(self.engine, "skipped_steps", 0))

    def _log_train(self, w: _Window) -> None:
        self._check_nonfinite()
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
            skipped_steps=max(self.skipped_steps, self._overflow_skips()),
            epoch=self.streams.epoch,
            mix_tokens=(mix := self.streams.mix_tokens()),  # a collective for a mix: every rank
            mix_shares=mix_shares(mix),
            transient_faults=self.reruns.transient if self.reruns else None,
            requeues=self.requeues,  # wandb shows at which steps the job was requeued
            slurm_job_id=_int_or_none(os.environ.get("SLURM_JOB_ID")),
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
        self._check_nonfinite()  # never save what should have ended the run
        if (since := self.spikes.suspect_since) is not None:  # guard.py: never save a spike
            self._announce(f"not saving step {self.step}: the loss is spiky since step {since}")
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


class _Window:
    """Sums over the training steps since the last log line (evals and saves excluded); the
    loss stays on the device until the line is written."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), device=device)
        self.steps, self.tokens, self.data_wait, self.seconds = 0, 0, 0.0, 0.0

    def add(self, loss: torch.Tensor, tokens: int, data_wait: float, seconds: float) -> None:
        self.loss_sum += loss
        self.steps += 1
        self.tokens += tokens
        self.data_wait += data_wait
        self.seconds += seconds

    def mean_loss(self, world_size: int) -> float:
        """The loss averaged over the window's steps and all ranks (a collective)."""
        total = self.loss_sum.clone()
        if dist.is_initialized():
            dist.all_reduce(total)
        return total.item() / (self.steps * world_size)


class _NonFinite:
    """Non-finite losses: how many in a row now, the longest such run and all of them, each the
    largest over ranks when read. Each step's loss stays on the device until a read (log lines
    and saves) looks at all of them at once."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pending: list[torch.Tensor] = []  # the losses since the last read
        self.in_a_row = self.longest = self.total = 0

    def add(self, loss: torch.Tensor) -> None:
        self.pending.append(loss)

    def read(self) -> tuple[int, int]:
        """(longest run, total) over all ranks (a collective)."""
        if self.pending:
            for bad in (~torch.isfinite(torch.stack(self.pending))).tolist():
                self.in_a_row = (self.in_a_row + 1) * bad
                self.longest = max(self.longest, self.in_a_row)
                self.total += bad
            self.pending = []
        counts = torch.tensor([self.longest, self.total], device=self.device)
        if dist.is_initialized():
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        longest, total = counts.tolist()
        return longest, total


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value else None
