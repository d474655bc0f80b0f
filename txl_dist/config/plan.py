"""The run plan: what a run config comes to on a world size, derived and checked once.

`RunConfig.plan(world_size)` runs before any process group, so a batch that does not split over
the ranks is refused at start-up, not at the first evaluation hours later; every rank derives
the same plan from the same config. `DeepSpeedSection` names the keys of the config's
`deepspeed` section that txl-dist reads itself (DeepSpeed gets the whole section).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from txl_dist.schema import ConfigError

PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes of one weight or activation value


class DeepSpeedSection:
    """Named reads of a DeepSpeed config dict: the one place its keys are looked up."""

    def __init__(self, section: dict[str, Any]):
        self.section = section

    @property
    def zero_stage(self) -> int:
        """ZeRO stage 0-3 (`zero_optimization.stage`, 0 if absent)."""
        return int(self.section.get("zero_optimization", {}).get("stage", 0))

    @property
    def precision(self) -> str:
        """fp32, or bf16 / fp16 where that section is enabled; both at once is refused."""
        enabled = [key for key in ("bf16", "fp16") if self.section.get(key, {}).get("enabled")]
        if len(enabled) > 1:
            raise ConfigError(
                "deepspeed.bf16.enabled and deepspeed.fp16.enabled are both true; enable at most "
                "one (--set deepspeed.fp16.enabled=false)"
            )
        return enabled[0] if enabled else "fp32"

    @property
    def check_grad_overflow(self) -> bool:
        """Whether the section sets `bf16.check_grad_overflow` to true itself (DeepSpeed's
        default, when it is absent, is not counted)."""
        return bool(self.section.get("bf16", {}).get("check_grad_overflow"))

    @property
    def gradient_clipping(self) -> float:
        """Largest global gradient norm before clipping (0: none)."""
        return float(self.section.get("gradient_clipping", 0.0))

    @property
    def micro_rows(self) -> int | None:
        """`train_micro_batch_size_per_gpu` where the config pins it."""
        return self.section.get("train_micro_batch_size_per_gpu")

    @property
    def accumulation(self) -> int | None:
        """`gradient_accumulation_steps` where the config pins it."""
        return self.section.get("gradient_accumulation_steps")

    @property
    def train_batch_size(self) -> int | None:
        """`train_batch_size` where the config gives it (txl-dist sets it from global rows)."""
        return self.section.get("train_batch_size")


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A run config on `world_size` ranks: batch layout, evaluation rows and precision."""

    world_size: int
    """Ranks the plan is for."""
    global_rows: int
    """Rows of one optimizer step over all ranks (train.global_rows)."""
    micro_rows: int
    """Rows one rank runs in one forward and backward (DeepSpeed's micro batch)."""
    accumulation: int
    """Micro batches per optimizer step on each rank (DeepSpeed's gradient accumulation)."""
    eval_rows_per_rank: int
    """Rows of one evaluation batch on each rank (train.eval_rows, else global_rows, split)."""
    precision: str
    """fp32, bf16 or fp16: what the engine trains in."""

    @property
    def rows_per_rank(self) -> int:
        """Stream rows one rank trains on per optimizer step."""
        return self.micro_rows * self.accumulation

    @property
    def eval_rows(self) -> int:
        """Rows of one evaluation batch over all ranks."""
        return self.eval_rows_per_rank * self.world_size

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one weight or activation value in the engine."""
        return PRECISION_BYTES[self.precision]

    @property
    def low_precision(self) -> bool:
        """Whether weights and activations are 16-bit (bf16 or fp16)."""
        return self.dtype_bytes == 2


def plan_run(
    world_size: int,
    global_rows: int,
    eval_rows: int | None,
    max_micro_rows: int | None,
    ds: DeepSpeedSection,
) -> RunPlan:
    """The plan of a run's train.global_rows / eval_rows / max_micro_rows and deepspeed section
    on `world_size` ranks; ConfigError names the key to change."""
    micro, accum = batch_layout(world_size, global_rows, max_micro_rows, ds)
    evaluation = eval_rows or global_rows
    if evaluation % world_size:
        raise ConfigError(
            f"train.eval_rows={evaluation} must be a multiple of the world size {world_size}; "
            f"set train.eval_rows to a multiple of {world_size} (e.g. "
            f"{-(-evaluation // world_size) * world_size})"
        )
    return RunPlan(
        world_size=world_size,
        global_rows=global_rows,
        micro_rows=micro,
        accumulation=accum,
        eval_rows_per_rank=evaluation // world_size,
        precision=ds.precision,
    )


def batch_layout(
    world_size: int, rows: int, max_micro_rows: int | None, ds: DeepSpeedSection
) -> tuple[int, int]:
    """(micro batch rows, accumulation steps) per rank, checked against train.global_rows.

    DeepSpeed's `train_micro_batch_size_per_gpu` / `gradient_accumulation_steps` pin the
    layout when given; otherwise the micro batch is the largest that divides the rank's rows
    and fits train.max_micro_rows, so one preset runs on any world size that divides it.
    """
    if rows % world_size:
        supported = [str(n) for n in range(1, rows + 1) if rows % n == 0]
        raise ConfigError(
            f"batch layout: train.global_rows={rows} does not split evenly over {world_size} "
            f"ranks; this config runs on {', '.join(supported)} ranks: set train.global_rows "
            f"to a multiple of {world_size} (e.g. {-(-rows // world_size) * world_size})"
        )
    per_rank = rows // world_size
    micro, accum = ds.micro_rows, ds.accumulation
    if micro is None and accum is None:
        limit = max_micro_rows or per_rank
        micro = max(n for n in range(1, min(limit, per_rank) + 1) if per_rank % n == 0)
    if micro is None:
        micro = per_rank // accum
    if accum is None:
        accum = per_rank // micro
    if not micro or not accum or micro * accum != per_rank:
        raise ConfigError(
            f"batch layout: train.global_rows={rows} must equal world size {world_size} x "
            f"deepspeed.train_micro_batch_size_per_gpu ({micro}) x "
            f"deepspeed.gradient_accumulation_steps ({accum}); change one of them, or leave "
            "both out to have them derived from train.max_micro_rows"
        )
    if ds.train_batch_size not in (None, rows):
        raise ConfigError(
            f"deepspeed.train_batch_size={ds.train_batch_size} differs from "
            f"train.global_rows={rows}; leave it out (txl-dist sets it)"
        )
    return micro, accum
