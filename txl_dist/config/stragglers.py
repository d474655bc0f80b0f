"""The run config's `stragglers` section: naming a rank that slows every synchronous step."""

from __future__ import annotations

import dataclasses

POLICIES = ("warn", "stop")


@dataclasses.dataclass
class StragglerConfig:
    """Straggler detection: every `interval` steps the ranks compare their time per section."""

    enabled: bool = True
    """Time the step's sections and compare the ranks (false: no timing, no exchange)."""
    interval: int = 50
    """Steps between the ranks' exchanges of their section times (one small all_gather)."""
    threshold: float = 0.75
    """Relative score (the fastest rank's time / this rank's) under which a section is slow."""
    min_share: float = 0.05
    """Least share of the median step time a slow section must cost above the fastest rank's."""
    consecutive: int = 2
    """Intervals in a row a section must be slow before its rank is named."""
    individual_threshold: float | None = None
    """Individual score (a rank's best interval / this one) under which a section also counts as
    slow, when it is slow against the fastest rank too; null: relative scores alone."""
    policy: str = "warn"
    """warn: name the rank and train on; stop: checkpoint and exit STRAGGLER_EXIT_CODE (76)."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"stragglers.policy must be warn or stop, got {self.policy!r}")
        for name in ("interval", "consecutive"):
            if getattr(self, name) < 1:
                raise ValueError(f"stragglers.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("threshold", "individual_threshold"):
            value = getattr(self, name)
            if value is not None and not 0 < value < 1:
                raise ValueError(f"stragglers.{name} must be between 0 and 1, got {value}")
        if not 0 <= self.min_share < 1:
            raise ValueError(f"stragglers.min_share must be in [0, 1), got {self.min_share}")
