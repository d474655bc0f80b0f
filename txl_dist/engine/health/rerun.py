"""A step trained again on the same batch, memories and random state before its result is
acted on, to tell a transient fault (a flipped bit, a bad kernel) from the data or numerics.

Each step keeps what a second attempt needs: the memories (references: a step replaces them, it
never writes into them), the RNG states, the schedule and the learning rates. Each rank also
sums its own gradients before they are reduced (a tensor hook per parameter, one pass each).
Between the step's last backward and DeepSpeed's update the ranks gather every rank's loss and
gradient sum (one all-gather of two floats and a read on the host), and the update is made to
skip (a NaN in the reduced gradient: DeepSpeed then skips it as an overflow) where

- a rank's gradient sum is non-finite or FAULT_RATIO times every other rank's: a fault whose
  norm stays finite is caught there (ZeRO-3 sums the squares of a flipped exponent bit, 1e36,
  in float64, without overflow, and would apply the clipped update);
- the mean loss is above the spike detector's bound (spikes.py, as its last check left it): a
  spike is re-run before the detector confirms it and rolls back;
- the step is a periodic replay's (`spikes.replay_interval`).

A step DeepSpeed skipped by itself (a non-finite loss or norm) is trained again too. Then every
rank runs the step again (its collectives in the same order; the second attempt is never made
to skip) and compares both attempts' results:

- a rank whose result changed had a transient fault: it is named in one line and a
  metrics.jsonl record, and the second attempt's update stands (the model is the one the step
  would have given without the fault);
- equal results mean the data or the numerics: a non-finite step stays skipped and counted
  (train.max_nonfinite_steps); a finite one is applied the second time, with a line and an
  `event: rerun` record where it was an outlier or spiky (a replay says nothing), so the
  spike detector goes on to confirm a spike and roll back, and a false alarm costs one step.

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

from txl_dist.engine.health.inject import BitFlip
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics

log = logging.getLogger(__name__)

RERUN_TOLERANCE = 1e-4  # relative, on a GPU only: the last bits of non-deterministic kernels
# Healthy ranks' gradient sums differ by a few orders of magnitude at most (the sums cancel);
# the top exponent bit flipped multiplies one element by 2**128 (1e38).
FAULT_RATIO = 1e6


class StepRerun:
    """Runs each training step, and once more where DeepSpeed skipped its update."""

    def __init__(self, engine, scheduler, memory: MemoryBank, rank: int, metrics: Metrics,
                 device: torch.device, replay_interval: int = 0):  # fmt: skip
        self.engine, self.scheduler, self.memory, self.metrics = engine, scheduler, memory, metrics
        self.rank, self.device, self.replay_interval = rank, device, replay_interval
        self.loss_bound = math.inf  # the spike detector's, set at its checks (monitor.py)
        self.first: list[tuple[float, float]] | None = None  # the first attempt's results
        self.why: str | None = None  # why the first attempt's update was made to skip
        self.flip = BitFlip.from_env()
        self.step, self.attempt = 0, 1
        self.sums: list[torch.Tensor] = []  # each gradient's of this rank, before the reduction
        for param in engine.module.parameters():
            if param.requires_grad:
                param.register_hook(self._seen)
        self.transient = 0
        """Transient faults found so far (by this start of the run)."""

    def _seen(self, grad: torch.Tensor) -> torch.Tensor | None:
        """Add this rank's gradient to its sum; flip a bit where TXL_INJECT_BITFLIP says (once
        per step: the first parameter whose gradient comes)."""
        if self.flip is not None and self.flip.hits(self.step, self.rank, self.attempt):
            grad, self.flip = self.flip.flipped(grad), None  # one hit
        # A sum in the gradient's own dtype: one pass over it (a norm in fp32 costs 3 times as
        # much on a CPU); any change a re-run looks for (a non-finite result) shows in it.
        # Kept apart and added once per step: an add per gradient costs as much as its sum.
        self.sums.append(grad.sum())
        return grad

    def before_update(self, loss: torch.Tensor) -> None:
        """Between a step's last backward and DeepSpeed's update, on a first attempt: every
        rank's loss and gradient sum gathered (a collective), and a NaN put in the reduced
        gradient (DeepSpeed skips the update, `run` trains the step again) where `suspect`."""
        if self.attempt != 1:
            return
        self.first = self._results(loss)
        self.why = self.suspect(self.first)
        if self.why and self.rank == 0:  # one rank's NaN makes the all-reduced norm NaN
            poison(self.engine)

    def suspect(self, results: list[tuple[float, float]]) -> str | None:
        """Why the step is trained again before its update: a rank's gradient sum an outlier,
        the mean loss above `loss_bound` (a spike: re-run before any rollback), or a periodic
        replay (spikes.replay_interval); None: no reason."""
        losses, sums = zip(*results)
        if len(sums) > 1 and outlier(list(sums)):
            return "a rank's gradient sum was an outlier"
        if sum(losses) / len(losses) > self.loss_bound:
            return "its loss was spiky"
        if self.replay_interval and self.step % self.replay_interval == 0:
            return "a periodic replay"
        return None

    def run(self, step: int, train_step: Callable[[], torch.Tensor], skips: Callable[[], int]):
        """Train step `step` (`train_step()`), twice where its update was skipped; its loss."""
        self.step, self.attempt = step, 1
        saved = self._saved()
        skipped = skips()
        self.sums = []
        self.first, self.why = None, None
        loss = train_step()
        if skips() == skipped:
            return loss
        first = self.first or self._results(loss)
        self._restore(saved)
        self.attempt, self.sums, skipped = 2, [], skips()
        loss = train_step()
        tolerance = RERUN_TOLERANCE if self.device.type == "cuda" else 0.0
        second = self._results(loss)
        changed = [r for r, (a, b) in enumerate(zip(first, second)) if differ(a, b, tolerance)]
        if changed:
            self._tell(step, changed)
        elif self.why and self.why != "a periodic replay" and skips() == skipped:  # applied
            self._same(step, self.why)
        return loss

    def _saved(self) -> tuple:
        groups = self.scheduler.optimizer.param_groups
        # A step draws only from torch's generators (dropout; its batch is drawn before it), so
        # those are what a second attempt needs: numpy's and Python's cost 10x as much to copy.
        cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() else None
        return (list(self.memory.slots), (torch.get_rng_state(), cuda),
                self.scheduler.state_dict(), [g["lr"] for g in groups])  # fmt: skip

    def _restore(self, saved: tuple) -> None:
        slots, rng, schedule, lrs = saved
        self.memory.slots = list(slots)
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state(rng[1])
        self.scheduler.load_state_dict(schedule)
        for group, lr in zip(self.scheduler.optimizer.param_groups, lrs):
            group["lr"] = lr

    def _results(self, loss: torch.Tensor) -> list[tuple[float, float]]:
        """Every rank's (loss, sum of its own gradients) (a collective)."""
        mine = torch.stack([loss.detach().float(), self._grad_sum()])
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return [tuple(mine.tolist())]
        every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        return [tuple(t.tolist()) for t in every]

    def _grad_sum(self) -> torch.Tensor:
        """The sum of this rank's gradients this attempt (in float32)."""
        if not self.sums:
            return torch.zeros((), device=self.device)
        if len({s.dtype for s in self.sums}) > 1:  # mixed dtypes do not stack
            return torch.stack([s.float() for s in self.sums]).sum()
        return torch.stack(self.sums).float().sum()

    def _tell(self, step: int, ranks: list[int]) -> None:
        self.transient += 1
        record = dict(step=step, event="transient_fault", ranks=ranks)
        self.metrics.log(
            record,
            f"transient fault at step {step} on rank {', '.join(map(str, ranks))}: its loss or "
            "gradient changed when the step ran again on the same batch, memories and random "
            "state; the first attempt discarded, the second's update kept",
        )

    def _same(self, step: int, why: str) -> None:
        self.metrics.log(
            dict(step=step, event="rerun", reason=why, same=True),
            f"step {step} trained again before its update ({why}): the same result on every "
            "rank, so the data or the numerics, not a fault; the second attempt's update kept",
        )


def outlier(sums: list[float]) -> bool:
    """Whether one rank's gradient sum is non-finite or FAULT_RATIO times every other's."""
    sizes = [abs(s) for s in sums]
    for rank, size in enumerate(sizes):
        others = max(sizes[:rank] + sizes[rank + 1 :])
        if not math.isfinite(size) or size > FAULT_RATIO * others:
            return True
    return False


def poison(engine) -> None:
    """A NaN in this rank's share of the reduced gradient (ZeRO-1/2/3: the optimizer's averaged
    partitions; ZeRO-0: the parameters' gradients), in its largest tensor: the global norm
    DeepSpeed takes of it is NaN on every rank, which skips the update and clears the gradients
    as an overflow does. One rank's NaN is enough: rank 0 puts it, in a real gradient share."""
    shares = getattr(engine.optimizer, "averaged_gradients", None) or {}
    grads = [g for s in shares.values() for g in (s if isinstance(s, (list, tuple)) else [s])]
    grads += [p.grad for p in engine.module.parameters()]
    largest = max((g for g in grads if g is not None), key=torch.numel, default=None)
    if largest is not None and largest.numel():
        largest.view(-1)[0] = math.nan


def differ(a: tuple[float, float], b: tuple[float, float], tolerance: float = 0.0) -> bool:
    """Whether two attempts' results differ (NaN equals NaN: the same non-finite result)."""
    for x, y in zip(a, b):
        if math.isnan(x) and math.isnan(y):
            continue
        if not (x == y or math.isclose(x, y, rel_tol=tolerance)):
            return True
    return False
