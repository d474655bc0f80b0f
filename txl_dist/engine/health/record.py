"""What a checkpoint keeps of the spike detector: the data position, the statistic's window and
the rollbacks, so a resume detects, skips and stops as the run it continues would have."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from txl_dist.engine.checkpoint.parts.part import Place
from txl_dist.engine.checkpoint.parts.run import RunState
from txl_dist.engine.health.spikes import SpikeDetector


@dataclass
class Rollback:
    """One rollback, as the checkpoint, the log and metrics.jsonl keep it."""

    step: int
    """The step that confirmed the spike."""
    spike_step: int
    """The spike's first step."""
    loss: float
    """The loss at the spike's first step."""
    median: float
    """The window's median loss then."""
    deviation: float
    """The window's robust deviation of the loss then (1.4826 MAD)."""
    restored_step: int
    """The step of the checkpoint restored."""
    skipped: list[int]
    """[FIRST, LAST]: the data positions skipped (batches never trained on)."""


@dataclass
class SpikeRecord:
    """The detector's state and this run's rollbacks."""

    detector: SpikeDetector
    """The running statistic."""
    position: int = 0
    """Batches drawn from the streams so far, skipped ones too (the next batch's is one more)."""
    rollbacks: list[Rollback] = field(default_factory=list)
    """Every rollback of the run, oldest first."""


@dataclass
class SpikesPart:
    """The spike record in txl.json; a checkpoint from before it resumes at position = step."""

    record: SpikeRecord
    """The run's record."""
    run: RunState
    """The run's state, whose step is restored before the parts."""
    name: str = "spikes"
    place: Place = Place.RECORD

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.record.position,
            "detector": self.record.detector.state_dict(),
            "rollbacks": [vars(r) for r in self.record.rollbacks],
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is None:
            self.record.position = self.run.step
            return
        self.record.position = state["position"]
        self.record.detector.load_state_dict(state["detector"])
        self.record.rollbacks = [Rollback(**r) for r in state["rollbacks"]]
