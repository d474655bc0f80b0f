"""A step whose update was skipped (a non-finite loss or gradient norm) trained again on the
same batch, memories and random state, to tell a transient fault from the data or numerics.

Each step keeps what a second attempt needs: the memories (references: a step replaces them, it
never writes into them), the RNG states, the schedule and the learning rates. Each rank also
sums its own gradients before they are reduced (a tensor hook per parameter, one pass each): its
result, with its own loss. The fault is seen on the host without a read of its own: DeepSpeed
already reads whether it skipped the update, the same on every rank. Then every rank runs the
step again (its collectives in the same order) and the ranks gather both attempts' results:

- a rank whose result changed had a transient fault: it is named in one line and a
  metrics.jsonl record, and the second attempt's update stands (the model is the one the step
  would have given without the fault);
- equal results mean the data or the numerics: the step stays skipped and counted, as every
  non-finite step is (train.max_nonfinite_steps).

Results are compared exactly: CPU kernels are deterministic; on a GPU, kernels with atomics
(the embedding's backward) may differ in the last bits, so there a relative difference under
`RERUN_TOLERANCE` counts as equal.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
import torch.distributed as dist

from txl_dist.engine.checkpoint.parts.memory import rng_state, set_rng_state
from txl_dist.engine.health.inject import BitFlip
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics

log = logging.getLogger(__name__)

RERUN_TOLERANCE = 1e-4  # relative, on a GPU only: the last bits of non-deterministic kernels


class StepRerun:
    """Runs each training step, and once more where DeepSpeed skipped its update."""

    def __init__(self, engine, scheduler, memory: MemoryBank, rank: int, metrics: Metrics,
                 device: torch.device):  # fmt: skip
        self.engine, self.scheduler, self.memory, self.metrics = engine, scheduler, memory, metrics
        self.rank, self.device = rank, device
        self.flip = BitFlip.from_env()
        self.step, self.attempt = 0, 1
        self.grad_sums = torch.zeros((), device=device)  # this rank's, before the reduction
        for param in engine.module.parameters():
            if param.requires_grad:
                param.register_hook(self._seen)
        self.transient = 0
        """Transient faults found so far (by this start of the run)."""

    def _seen(self, grad: torch.Tensor) -> torch.Tensor | None:
        """Add this rank's gradient to its sum; flip a bit where TXL_INJECT_BITFLIP says (once
        per step: the first parameter whose gradient comes)."""
        if self.flip is not None and self.flip.hits(self.step, self.rank, self.attempt):
            grad, self.attempt = self.flip.flipped(grad), -1  # one hit: -1 is no attempt
        # A sum in the gradient's own dtype: one pass over it (a norm in fp32 costs 3 times as
        # much on a CPU); any change a re-run looks for (a non-finite result) shows in it.
        self.grad_sums += grad.detach().sum()
        return grad

    def run(self, step: int, train_step: Callable[[], torch.Tensor], skips: Callable[[], int]):
        """Train step `step` (`train_step()`), twice where its update was skipped; its loss."""
        self.step, self.attempt = step, 1
        saved = self._saved()
        skipped = skips()
        self.grad_sums.zero_()
        loss = train_step()
        if skips() == skipped:
            return loss
        first = self._results(loss)
        self._restore(saved)
        self.attempt = 2
        self.grad_sums.zero_()
        loss = train_step()
        tolerance = RERUN_TOLERANCE if self.device.type == "cuda" else 0.0
        second = self._results(loss)
        changed = [r for r, (a, b) in enumerate(zip(first, second)) if differ(a, b, tolerance)]
        if changed:
            self._tell(step, changed)
        return loss

    def _saved(self) -> tuple:
        groups = self.scheduler.optimizer.param_groups
        return (list(self.memory.slots), rng_state(), self.scheduler.state_dict(),
                [g["lr"] for g in groups])  # fmt: skip

    def _restore(self, saved: tuple) -> None:
        slots, rng, schedule, lrs = saved
        self.memory.slots = list(slots)
        set_rng_state(rng)
        self.scheduler.load_state_dict(schedule)
        for group, lr in zip(self.scheduler.optimizer.param_groups, lrs):
            group["lr"] = lr

    def _results(self, loss: torch.Tensor) -> list[tuple[float, float]]:
        """Every rank's (loss, sum of its own gradients) (a collective)."""
        mine = torch.stack([loss.detach().float(), self.grad_sums.clone()])
        if not dist.is_initialized():
            return [tuple(mine.tolist())]
        every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        return [tuple(t.tolist()) for t in every]

    def _tell(self, step: int, ranks: list[int]) -> None:
        self.transient += 1
        record = dict(step=step, event="transient_fault", ranks=ranks)
        self.metrics.log(
            record,
            f"transient fault at step {step} on rank {', '.join(map(str, ranks))}: its loss or "
            "gradient changed when the step ran again on the same batch, memories and random "
            "state; the first attempt discarded, the second's update kept",
        )


def differ(a: tuple[float, float], b: tuple[float, float], tolerance: float = 0.0) -> bool:
    """Whether two attempts' results differ (NaN equals NaN: the same non-finite result)."""
    for x, y in zip(a, b):
        if math.isnan(x) and math.isnan(y):
            continue
        if not (x == y or math.isclose(x, y, rel_tol=tolerance)):
            return True
    return False
