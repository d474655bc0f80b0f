"""Learning-rate multipliers per optimizer step, as the reference train.py computes them."""

from __future__ import annotations

import math
from collections.abc import Callable

from txl_dist.config.optim import OptimConfig


def lr_multiplier(optim: OptimConfig, max_steps: int) -> Callable[[int], float]:
    """Multiplier of optim.lr for the update with 0-based index `step` (LambdaLR's count)."""
    warmup = optim.warmup_steps
    floor = optim.min_lr / optim.lr if optim.lr else 0.0

    def multiplier(step: int) -> float:
        if optim.schedule == "inv_sqrt":
            # The reference's Noam-style lambda, including its value 1 at step 0 without warm-up.
            if step == 0 and warmup == 0:
                return 1.0
            return step**-0.5 if step > warmup else step / warmup**1.5
        if step < warmup:
            return (step + 1) / warmup  # the first update already gets lr / warmup
        if optim.schedule == "constant":
            return 1.0
        progress = min(step, max_steps) / max_steps
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return multiplier
