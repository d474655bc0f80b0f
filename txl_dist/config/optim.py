"""The `optim` section: the optimizer and its learning-rate schedule."""

from __future__ import annotations

import dataclasses

SCHEDULES = ("cosine", "inv_sqrt", "constant")
OPTIMIZERS = ("adam", "adamw", "lamb")


@dataclasses.dataclass
class OptimConfig:
    """Optimizer and learning-rate schedule (clipping is deepspeed.gradient_clipping)."""

    name: str = "adam"
    """adam, adamw or lamb."""
    lr: float = 2.5e-4
    """Peak learning rate."""
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])
    """Adam betas."""
    eps: float = 1e-8
    """Adam epsilon."""
    weight_decay: float = 0.0
    """Weight decay (decoupled for adamw)."""
    schedule: str = "cosine"
    """cosine (to min_lr at train.max_steps), inv_sqrt or constant, after linear warm-up."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to lr."""
    min_lr: float = 0.0
    """Floor of the cosine schedule (the reference's eta_min)."""

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optim.name must be one of {OPTIMIZERS}, got {self.name!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if len(self.betas) != 2:
            raise ValueError(f"optim.betas needs two values, got {self.betas}")
