"""The run config's typed sections: model, data (data.py), optim (optim.py), train, deepspeed,
wandb, logging, stragglers (stragglers.py), spikes (spikes.py).

Every section is a dataclass that txl_dist/schema.py builds from JSON, refusing unknown keys
(naming the closest valid one) and values of the wrong type (naming the expected type); each
section's `__post_init__` checks its values, and `RunConfig` checks what ties sections together,
so a typo in a run config fails before any process group or model is built.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from data_pipeline import redact
from txl_dist.config.data import DataConfig
from txl_dist.config.optim import OptimConfig
from txl_dist.config.plan import DeepSpeedSection, RunPlan, plan_run
from txl_dist.config.spikes import SpikesConfig
from txl_dist.config.stragglers import StragglerConfig
from txl_dist.model.config import TXLConfig
from txl_dist.schema import section_from_dict

# ---- the run config: one JSON file, sections model, data, optim, train, deepspeed, logging ----

WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclasses.dataclass
class TrainConfig:
    """Length, batch, evaluation, checkpoints and stopping of a run."""

    out_dir: str
    """Run directory: checkpoints, effective config, metrics.jsonl, wandb files."""
    global_rows: int
    """Rows of the global batch = world size x micro batch x gradient accumulation."""
    max_steps: int
    """Optimizer steps to train."""
    seed: int = 1111
    """Seed of weights, dropout and data order."""
    init_from: str | None = None
    """An export or checkpoint whose weights start the run (fresh optimizer, schedule, data)."""
    eval_interval: int = 1000
    """Steps between validation runs (0: only at the end)."""
    eval_rows: int | None = None
    """Global rows of evaluation batches; null means global_rows."""
    save_interval: int = 1000
    """Steps between checkpoints (0: only at the end and on signals)."""
    keep_last: int = 3
    """Checkpoints kept; older ones are deleted once a newer one is complete."""
    async_save: bool = True
    """Write checkpoints in the background from a snapshot in host memory, training on (a save
    is synchronous where a machine lacks the memory; docs/training.md)."""
    max_nonfinite_steps: int = 10
    """Abort after this many consecutive steps with a non-finite loss."""
    peak_tflops: float | None = None
    """Peak dense TFLOP/s of one device for MFU; null: a known GPU's peak in the run's precision."""
    activation_checkpointing: bool = False
    """Recompute each layer's activations in backward to save memory."""
    compile: bool = False
    """torch.compile each decoder layer (faster steps after a one-off compile; not with ZeRO-3)."""
    cuda_graphs: bool = False
    """Replay the decoder layers of a training step as CUDA graphs (no kernel launches from
    Python; CUDA devices, ZeRO stages 0-2, not with activation checkpointing)."""
    max_wallclock: float | None = None
    """Seconds after the process started at which the run checkpoints and stops by itself."""
    stop_check_s: float = 0.5
    """Seconds between the ranks' agreements on a stop (a stop acted on within about twice
    that); 0: at every step."""
    dist_timeout_s: float = 600.0
    """Seconds a collective waits for the other ranks; bounds the hang after a rank dies."""
    hang_timeout_s: float | None = 300.0
    """Seconds a step or eval batch may stall before the run ends as hung (null: never)."""
    checkpoint_timeout_s: float = 1800.0
    """The same for a checkpoint save or load, the start-up and the first (compiling) steps."""
    max_micro_rows: int | None = None
    """Most rows one device runs at once; micro batch and accumulation are derived from it."""
    profile_steps: list[int] | None = None
    """[START, END]: steps traced by torch's profiler into OUT_DIR/profile/ (null: none)."""
    norm_overflow_check: bool = True
    """bf16 at ZeRO-1/2: skip updates on a non-finite gradient norm, not DeepSpeed's per-gradient
    check (docs/training.md)."""
    one_rank_stage: int | None = 1
    """On one rank, the ZeRO stage of a ZeRO-1/2 config: 1 without gradient buckets (the same
    updates), 0 in fp32 (equal within float rounding); null keeps the config's."""
    fit_buckets: bool = False
    """ZeRO-1/2 buckets of the largest gradient's size (at most DeepSpeed's default) where the
    deepspeed section sets none: less memory, the same sums on one or two ranks."""

    def __post_init__(self) -> None:
        steps = self.profile_steps
        if steps is not None and (len(steps) != 2 or not 1 <= steps[0] <= steps[1]):
            raise ValueError(
                f"train.profile_steps must be [START, END] with 1 <= START <= END, got {steps}"
            )
        if self.max_micro_rows is not None and self.max_micro_rows < 1:
            raise ValueError(f"train.max_micro_rows must be at least 1, got {self.max_micro_rows}")
        for name in ("global_rows", "max_steps", "keep_last", "max_nonfinite_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be at least 1, got {getattr(self, name)}")
        if self.init_from is not None and not self.init_from.strip():
            raise ValueError(
                "train.init_from is empty; name an export or checkpoint directory, or null"
            )
        if self.stop_check_s < 0:
            raise ValueError(f"train.stop_check_s must be >= 0, got {self.stop_check_s}")
        for name in ("dist_timeout_s", "hang_timeout_s", "checkpoint_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:  # hang_timeout_s may be null
                raise ValueError(f"train.{name} must be positive, got {value}")


@dataclasses.dataclass
class WandbConfig:
    """Weights & Biases experiment tracking."""

    project: str = "txl-dist"
    """wandb project."""
    entity: str | None = None
    """wandb entity (user or team); null means the default."""
    name: str | None = None
    """Run name; null means the run directory's name."""
    mode: str = "auto"
    """auto (offline without an API key), online, offline or disabled."""
    dir: str | None = None
    """Where wandb writes; null means the run directory."""

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(f"logging.wandb.mode must be one of {WANDB_MODES}, got {self.mode!r}")


@dataclasses.dataclass
class LoggingConfig:
    """Console, metrics.jsonl and wandb."""

    log_interval: int = 100
    """Steps between training log lines."""
    wandb: WandbConfig = dataclasses.field(default_factory=WandbConfig)
    """wandb settings."""


@dataclasses.dataclass
class RunConfig:
    """Everything one training run needs; `deepspeed` is passed through to DeepSpeed."""

    model: TXLConfig
    """The model's hyperparameters."""
    data: DataConfig
    """Where the prepared data is."""
    train: TrainConfig
    """The loop: batch, steps, intervals, output directory."""
    deepspeed: dict[str, Any]
    """Passed to DeepSpeed (ZeRO stage, precision, clipping); txl-dist sets the batch keys."""
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    """Optimizer and learning-rate schedule."""
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    """Console, metrics.jsonl and wandb."""
    stragglers: StragglerConfig = dataclasses.field(default_factory=StragglerConfig)
    """Naming a rank that is slower than the others (docs/training.md, Slow ranks)."""
    spikes: SpikesConfig = dataclasses.field(default_factory=SpikesConfig)
    """Loss spikes detected and rolled back (docs/training.md)."""

    def __post_init__(self) -> None:
        if self.train.norm_overflow_check and self.ds.check_grad_overflow:
            raise ValueError(
                "deepspeed.bf16.check_grad_overflow=true and train.norm_overflow_check=true both "
                "check bf16 gradients for overflow; keep one (train.norm_overflow_check checks "
                "the gradient norm alone and skips the same updates)"
            )
        if self.train.one_rank_stage not in (None, 0, 1):
            raise ValueError(
                f"train.one_rank_stage must be 0, 1 or null, got {self.train.one_rank_stage}"
            )
        if self.train.one_rank_stage == 0 and self.ds.precision != "fp32":
            raise ValueError(
                f"train.one_rank_stage=0 needs fp32: DeepSpeed's ZeRO-0 in {self.ds.precision} "
                "reads every gradient back to the host at each update; use 1"
            )
        if self.train.compile and self.zero_stage == 3:
            raise ValueError(
                "train.compile does not work with ZeRO stage 3 (its parameter gathers run in "
                "hooks that torch.compile cannot trace); set train.compile=false or use "
                "deepspeed.zero_optimization.stage 0-2"
            )
        if self.train.cuda_graphs and self.zero_stage == 3:
            raise ValueError(
                "train.cuda_graphs does not work with ZeRO stage 3 (its parameter gathers run "
                "in hooks a graph cannot replay); set train.cuda_graphs=false or use "
                "deepspeed.zero_optimization.stage 0-2"
            )
        if self.train.cuda_graphs and self.train.activation_checkpointing:
            raise ValueError(
                "train.cuda_graphs and train.activation_checkpointing exclude each other (a "
                "graph keeps every layer's activations); set one of them to false"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def public_dict(self) -> dict[str, Any]:
        """What may be written or logged (config.json, checkpoints, wandb): secrets as ***."""
        return redact(self.to_dict())

    @property
    def ds(self) -> DeepSpeedSection:
        """The deepspeed section's keys that txl-dist reads, by name."""
        return DeepSpeedSection(self.deepspeed)

    @property
    def zero_stage(self) -> int:
        return self.ds.zero_stage

    def at_world_size(self, world_size: int) -> RunConfig:
        """This config as it runs on `world_size` ranks: on one rank, a ZeRO-1/2 deepspeed
        section takes train.one_rank_stage (at stage 1 without gradient buckets, unless the
        section asks for them). One rank holds the same model states at every stage (16 bytes a
        parameter by txl-inspect), so the choice never needs more memory."""
        stage = self.train.one_rank_stage
        if world_size != 1 or stage is None or self.zero_stage not in (1, 2):
            return self
        section = copy.deepcopy(self.deepspeed)
        zero = section.setdefault("zero_optimization", {})
        zero["stage"] = stage
        if stage == 1:
            zero.setdefault("contiguous_gradients", False)
        return dataclasses.replace(self, deepspeed=section)

    def plan(self, world_size: int) -> RunPlan:
        """This run on `world_size` ranks (plan.py), checked: ConfigError names the key."""
        train = self.train
        return plan_run(
            world_size, train.global_rows, train.eval_rows, train.max_micro_rows, self.ds
        )


def run_config_from_dict(values: dict[str, Any]) -> RunConfig:
    """Build and validate a RunConfig; every error names the section.key to change."""
    return section_from_dict(RunConfig, values)
