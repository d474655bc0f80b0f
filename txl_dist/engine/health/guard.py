"""The trainer's handle on loss spikes: each step's loss kept on the device, a check every
`spikes.check_interval` steps (one all-reduce), and on a confirmed spike a rollback with its
line, its metrics.jsonl record and its wandb event.

A save is refused while spiky steps are unconfirmed, so no checkpoint of a spike is ever
written: `latest` and retention only ever see good ones, and the newest checkpoint before a
spike is still there to roll back to.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from data_pipeline import BatchStream
from txl_dist.config.spikes import SpikesConfig
from txl_dist.engine.checkpoint import Checkpointer
from txl_dist.engine.health.inject import SpikeInjection
from txl_dist.engine.health.record import Rollback, SpikeRecord
from txl_dist.engine.health.rollback import LossSpikeError, roll_back, skipped
from txl_dist.engine.health.spikes import Observation, Spike
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics

log = logging.getLogger(__name__)


class SpikeGuard:
    """Loss spikes of this rank's run; every rank calls it at the same steps."""

    def __init__(
        self, config: SpikesConfig, record: SpikeRecord, world_size: int, metrics: Metrics
    ):
        self.config, self.record, self.world_size, self.metrics = (
            config,
            record,
            world_size,
            metrics,
        )
        self.injection = SpikeInjection.from_env()
        self.pending: list[tuple[int, int, torch.Tensor, Any]] = []

    def batch(self, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Count the batch just drawn; its targets, made random where TXL_INJECT_SPIKE says."""
        self.record.position += 1
        if self.injection is None:
            return targets
        return self.injection.apply(self.record.position, targets, vocab_size)

    def add(self, step: int, loss: torch.Tensor, grad_norm: Any) -> None:
        """Keep step `step`'s loss (on the device) and gradient norm for the next check."""
        if self.config.enabled:
            self.pending.append((step, self.record.position, loss, grad_norm))

    def due(self, step: int, saving: bool) -> bool:
        """Whether step `step` checks: every check_interval steps, and before a save."""
        return self.config.enabled and (saving or step % self.config.check_interval == 0)

    @property
    def suspect_since(self) -> int | None:
        """The first of the spiky steps not yet confirmed (a save waits); None: none."""
        return self.record.detector.suspect_since

    def check(self) -> Spike | None:
        """The steps since the last check, through the detector (a collective); a spike
        confirmed among them, if any (the steps after it are rolled back anyway)."""
        pending, self.pending = self.pending, []
        if not pending:
            return None
        losses = torch.stack([loss for _, _, loss, _ in pending]).float()
        if dist.is_initialized():
            dist.all_reduce(losses)
        for (step, position, _, norm), loss in zip(pending, (losses / self.world_size).tolist()):
            grad_norm = None if norm is None else float(norm)
            spike = self.record.detector.observe(Observation(step, position, loss, grad_norm))
            if spike is not None:
                return spike
        return None

    def checked(
        self, checkpoints: Checkpointer, zero_stage: int, streams: BatchStream, memory: MemoryBank
    ) -> tuple[int, Iterator[tuple[torch.Tensor, torch.Tensor]]] | None:
        """`check`, and on a spike `roll_back`: None, or the restored step and the batches."""
        spike = self.check()
        return (
            None
            if spike is None
            else self.roll_back(spike, checkpoints, zero_stage, streams, memory)
        )

    def roll_back(
        self, spike: Spike, checkpoints: Checkpointer, zero_stage: int, streams: BatchStream,
        memory: MemoryBank,
    ) -> tuple[int, Iterator[tuple[torch.Tensor, torch.Tensor]]]:  # fmt: skip
        """Restore the newest checkpoint before `spike` and skip the data up to skip_steps
        batches past it; returns the restored step and the streams from there. LossSpikeError
        where the rollbacks within rollback_window steps are used up, or nothing to restore."""
        self._check_limit(spike)
        point = roll_back(checkpoints, spike.first.step, zero_stage, memory)
        saved = point.client.parts.get("spikes")
        restored = saved["position"] if saved else point.client.step
        last = spike.last.position + self.config.skip_steps
        batches = skipped(streams, last - restored)
        self.record.position = last
        rollback = Rollback(
            step=spike.last.step, spike_step=spike.first.step, loss=spike.first.loss,
            median=spike.median, deviation=spike.deviation, restored_step=point.client.step,
            skipped=[restored + 1, last],
        )  # fmt: skip
        self.record.rollbacks.append(rollback)
        self._tell(rollback)
        return point.client.step, batches

    def _check_limit(self, spike: Spike) -> None:
        c = self.config
        near = [
            r for r in self.record.rollbacks if abs(r.step - spike.last.step) < c.rollback_window
        ]
        if len(near) >= c.max_rollbacks:
            raise LossSpikeError(
                f"loss spike at step {spike.first.step} (loss {spike.first.loss:.4f}, median "
                f"{spike.median:.4f}) after {len(near)} rollbacks within "
                f"{c.rollback_window} steps (spikes.max_rollbacks): the data or the config is "
                "at fault; lower optim.lr, check the data after the skipped windows, or raise "
                "spikes.skip_steps"
            )

    def _tell(self, r: Rollback) -> None:
        record = dict(
            step=r.step, event="rollback", spike_step=r.spike_step, spike_loss=r.loss,
            spike_median=r.median, spike_deviation=r.deviation, restored_step=r.restored_step,
            skipped_first=r.skipped[0], skipped_last=r.skipped[1],
        )  # fmt: skip
        self.metrics.log(
            record,
            f"loss spike at step {r.spike_step} (loss {r.loss:.4f}, median {r.median:.4f}, "
            f"deviation {r.deviation:.4f}; confirmed at step {r.step}): rolled back to step "
            f"{r.restored_step}, skipped data positions {r.skipped[0]}-{r.skipped[1]}",
        )
