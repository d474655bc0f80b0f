"""One checkpoint's size, estimated from the model's config before any engine exists: what the
start-up check asks of the disk and what a save that ran out of space says it needed."""

from __future__ import annotations

from txl_dist.config.sections import RunConfig
from txl_dist.model.accounting import ZERO_STAGES, build_on_meta, count_parameters

# Model-state bytes per parameter that one checkpoint holds over all ranks: the weights plus
# fp32 master weights and Adam's two moments (ZeRO-0's mixed-precision figure).
CHECKPOINT_BYTES_PER_PARAMETER = ZERO_STAGES[0](1)


def checkpoint_bytes(config: RunConfig) -> float:
    """An estimate of one checkpoint's size: model states of every parameter."""
    parameters, _ = count_parameters(build_on_meta(config.model))
    return parameters * CHECKPOINT_BYTES_PER_PARAMETER
