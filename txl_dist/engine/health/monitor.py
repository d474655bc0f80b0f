"""The trainer's one handle on training health, called at fixed points of each step and save:

- the batch drawn (its data position; TXL_INJECT_SPIKE) and the sections timed (stragglers);
- the step's attempts (rerun.py: again where its update was skipped) and, between its last
  backward and the update, the ranks' gradients compared;
- the step done: its loss counted (non-finite, spike statistic), the straggler exchange;
- after it: the spike check and its rollback;
- before a save: the non-finite bound, and no save while the loss is spiky.

Every rank calls it at the same points, so its collectives line up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from data_pipeline import BatchStream
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint import Checkpointer
from txl_dist.engine.health.guard import SpikeGuard
from txl_dist.engine.health.nonfinite import NonFinite
from txl_dist.engine.health.record import SpikeRecord
from txl_dist.engine.health.rerun import StepRerun
from txl_dist.engine.health.stragglers import StragglerDetector
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics
from txl_dist.process.dist import World


class Health:
    """Spikes, non-finite steps, re-runs and stragglers of this rank's run."""

    def __init__(
        self,
        spikes: SpikeGuard,
        nonfinite: NonFinite,
        stragglers: StragglerDetector,
        reruns: StepRerun | None = None,
    ):
        self.spikes, self.nonfinite, self.stragglers = spikes, nonfinite, stragglers
        self.reruns = reruns
        self._bound()  # a resumed run's statistic, from its checkpoint

    @classmethod
    def of(
        cls, config: RunConfig, world: World, device: torch.device, engine, scheduler,
        memory: MemoryBank, metrics: Metrics, record: SpikeRecord, precision: str,
    ) -> Health:  # fmt: skip
        """The run's detectors, on `engine` (its gradient hooks and reduction timer)."""
        can_skip = config.zero_stage > 0 or precision != "fp32"  # fp32 ZeRO-0 applies NaN
        # CUDA graphs replay no hooks; fp16 halves its loss scale on a skipped update, so a
        # second attempt's gradients differ on every rank.
        fp16 = precision == "fp16"
        reruns = (
            StepRerun(
                engine,
                scheduler,
                memory,
                world.rank,
                metrics,
                device,
                config.spikes.replay_interval,
            )  # fmt: skip
            if config.spikes.rerun and can_skip and not (config.train.cuda_graphs or fp16)
            else None
        )
        return cls(
            SpikeGuard(config.spikes, record, world.world_size, metrics),
            NonFinite(device, config.train.max_nonfinite_steps, can_skip),
            StragglerDetector.of(config.stragglers, world, device, engine, metrics.log),
            reruns,
        )

    def timed(self, section: str) -> contextlib.AbstractContextManager:
        """Time a section of the step for the straggler scores."""
        return self.stragglers.timed(section)

    def batch(self, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Count the batch just drawn; its targets (random where TXL_INJECT_SPIKE says)."""
        return self.spikes.batch(targets, vocab_size)

    def attempts(self, step: int, train_step: Callable[[], torch.Tensor], skips) -> torch.Tensor:
        """`train_step()` for step `step`, again where its update was skipped; its loss."""
        return self.reruns.run(step, train_step, skips) if self.reruns else train_step()

    def before_update(self, loss: torch.Tensor) -> None:
        """Between the step's last backward and DeepSpeed's update, with the step's loss so far
        (rerun.py: the ranks compared, the update skipped where the step is trained again)."""
        if self.reruns:
            self.reruns.before_update(loss)

    def stepped(self, step: int, loss: torch.Tensor, grad_norm: Any) -> str | None:
        """Step `step` done with `loss` (on the device); why the run stops where a straggler
        under the stop policy was named (a collective every stragglers.interval steps)."""
        self.nonfinite.add(loss)
        self.spikes.add(step, loss, grad_norm)
        return self.stragglers.step_done(step)

    def rolled_back(
        self, step: int, saving: bool, checkpoints: Checkpointer, zero_stage: int,
        streams: BatchStream, memory: MemoryBank,
    ) -> tuple[int, Iterator[tuple[torch.Tensor, torch.Tensor]]] | None:  # fmt: skip
        """After step `step` (a save coming if `saving`): where a check confirms a spike, the
        rollback's restored step and the batches from there (guard.py); else None."""
        if not self.spikes.due(step, saving):
            return None
        back = self.spikes.checked(checkpoints, zero_stage, streams, memory)
        if back:
            self.nonfinite.clear()  # the rolled-back steps' counts are gone with them
        self._bound()
        return back

    def _bound(self) -> None:
        """The re-run's spiky loss: the detector's, as its last check left it."""
        if self.reruns and self.spikes.config.enabled:
            self.reruns.loss_bound = self.spikes.record.detector.bound()

    def skipped_steps(self, step: int) -> int:
        """Steps with a non-finite loss so far (a collective); NonFiniteLossError where the
        run must end (nonfinite.py)."""
        return self.nonfinite.check(step)

    def refuses_save(self, step: int) -> str | None:
        """Why step `step` is not saved (the loss spiky since an unconfirmed step), or None."""
        since = self.spikes.suspect_since
        return None if since is None else f"the loss is spiky since step {since}"

    @property
    def transient(self) -> int | None:
        """Transient faults found by this start of the run (None: the re-run is off)."""
        return self.reruns.transient if self.reruns else None
