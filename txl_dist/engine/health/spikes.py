"""Loss spikes: a robust running statistic of the loss and the gradient norm, and its verdict.

Each checked step's loss (the mean over ranks) is compared with the median of the last
`spikes.window` good steps: it is spiky when it lies more than `threshold` robust deviations
(1.4826 x the median absolute deviation, a standard deviation for normal noise) above the median
and at least `min_rise` of the median above it. The test is one-sided, so the loss falling (the
warm-up, a mix's easy first documents) never fires, and it starts only once the window is full,
so the first steps' fast changes never do. `confirm_steps` spiky steps in a row are a spike;
fewer are noise, and join the window like any step. Non-finite losses are left to the trainer's
non-finite count (DeepSpeed skipped their updates).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from txl_dist.config.spikes import SpikesConfig

MAD_TO_SIGMA = 1.4826  # the MAD of normal noise times this is its standard deviation


@dataclass
class Observation:
    """One training step as the detector sees it."""

    step: int
    """The step (optimizer steps done after it)."""
    position: int
    """Its batch's data position: batches drawn from the streams before it and it (skips too)."""
    loss: float
    """Its loss, the mean over ranks."""
    grad_norm: float | None
    """Its gradient norm (the same on every rank), None where DeepSpeed keeps none."""


@dataclass
class Spike:
    """A confirmed spike: its steps and what the statistic said at its first."""

    first: Observation
    """The first spiky step."""
    last: Observation
    """The step that confirmed it."""
    median: float
    """The window's median loss."""
    deviation: float
    """The window's robust deviation of the loss (1.4826 MAD)."""


def robust_z(value: float, window: deque[float]) -> tuple[float, float, float]:
    """(median, robust deviation, z) of `value` against `window`."""
    median = statistics.median(window)
    deviation = MAD_TO_SIGMA * statistics.median(abs(v - median) for v in window)
    z = (value - median) / deviation if deviation > 0 else (math.inf if value > median else 0.0)
    return median, deviation, z


class SpikeDetector:
    """The window of good steps and the spiky steps after it; the same on every rank, since it
    sees the same numbers in the same order."""

    def __init__(self, config: SpikesConfig):
        self.config = config
        self.losses: deque[float] = deque(maxlen=config.window)
        self.norms: deque[float] = deque(maxlen=config.window)
        self.suspects: list[Observation] = []

    @property
    def suspect_since(self) -> int | None:
        """The first step of spiky steps not yet confirmed (None: none)."""
        return self.suspects[0].step if self.suspects else None

    def observe(self, seen: Observation) -> Spike | None:
        """Take one step; a Spike once `confirm_steps` spiky steps came in a row."""
        if not math.isfinite(seen.loss):
            return None
        if not self._spiky(seen):
            for step in [*self.suspects, seen]:  # a spiky step or two before were noise
                self._keep(step)
            self.suspects = []
            return None
        self.suspects.append(seen)
        if len(self.suspects) < self.config.confirm_steps:
            return None
        median, deviation, _ = robust_z(self.suspects[0].loss, self.losses)
        spike = Spike(self.suspects[0], seen, median, deviation)
        self.suspects = []
        return spike

    def _spiky(self, seen: Observation) -> bool:
        c = self.config
        if len(self.losses) < c.window:
            return False
        median, _, z = robust_z(seen.loss, self.losses)
        if z > c.threshold and seen.loss > median * (1 + c.min_rise):
            return True
        if not c.grad_norm_threshold or seen.grad_norm is None or len(self.norms) < c.window:
            return False
        median, _, z = robust_z(seen.grad_norm, self.norms)
        return z > c.grad_norm_threshold and seen.grad_norm > median * (1 + c.min_rise)

    def bound(self) -> float:
        """The loss above which a step is spiky now (inf until the window is full)."""
        if len(self.losses) < self.config.window:
            return math.inf
        median, deviation, _ = robust_z(0.0, self.losses)
        return max(median + self.config.threshold * deviation, median * (1 + self.config.min_rise))

    def _keep(self, seen: Observation) -> None:
        self.losses.append(seen.loss)
        if seen.grad_norm is not None and math.isfinite(seen.grad_norm):
            self.norms.append(seen.grad_norm)

    def state_dict(self) -> dict[str, Any]:
        return {
            "losses": list(self.losses),
            "norms": list(self.norms),
            "suspects": [asdict(s) for s in self.suspects],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses.clear()
        self.losses.extend(state["losses"])
        self.norms.clear()
        self.norms.extend(state["norms"])
        self.suspects = [Observation(**s) for s in state["suspects"]]
