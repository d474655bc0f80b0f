"""The run config's `spikes` section: loss-spike detection and automatic rollback."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class SpikesConfig:
    """Loss spikes: detected on a robust statistic, rolled back to the last good checkpoint."""

    enabled: bool = True
    """Detect loss spikes and roll back to the newest checkpoint before them."""
    window: int = 100
    """Good steps whose losses (and gradient norms) make the running median and MAD."""
    threshold: float = 8.0
    """A step is spiky when its loss lies this many robust deviations (1.4826 MAD) above the
    window's median..."""
    min_rise: float = 0.2
    """...and at least this fraction above the median (a flat loss has a tiny MAD)."""
    grad_norm_threshold: float = 0.0
    """The same test on the gradient norm, which then counts as a spike too (0: loss only)."""
    confirm_steps: int = 3
    """Consecutive spiky steps that confirm a spike (fewer are noise: trained through)."""
    check_interval: int = 10
    """Steps between the checks (one all-reduce each); a save and the last step check too."""
    skip_steps: int = 100
    """Batches skipped beyond the spike's, after the rollback, so the data behind it is not seen."""
    max_rollbacks: int = 3
    """Rollbacks allowed within rollback_window steps; the next spike stops the run (the data or
    the config is at fault, not luck)."""
    rollback_window: int = 1000
    """Steps within which max_rollbacks rollbacks stop the run."""

    rerun: bool = True
    """Train a step again before acting on it (its update skipped: non-finite, a rank's gradient
    an outlier, a spiky loss), to name a rank with a transient fault (not with
    train.cuda_graphs nor fp16, whose loss scale changes on a skipped update)."""
    replay_interval: int = 0
    """Every this many steps, train one step twice and compare (needs rerun; 0: never)."""

    def __post_init__(self) -> None:
        for name in (
            "window",
            "confirm_steps",
            "check_interval",
            "max_rollbacks",
            "rollback_window",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"spikes.{name} must be at least 1, got {getattr(self, name)}")
        for name in (
            "threshold",
            "min_rise",
            "grad_norm_threshold",
            "skip_steps",
            "replay_interval",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"spikes.{name} must be >= 0, got {getattr(self, name)}")
        if self.rollback_window < 1:
            raise ValueError(
                f"spikes.rollback_window must be at least 1, got {self.rollback_window}"
            )
