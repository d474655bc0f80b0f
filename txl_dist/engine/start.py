"""A run's start before any process group: its config at the world size, its guard told, its
run directory, its resume point, its init source and the checks before training, as one `Run`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from txl_dist.config.loading import load_run_config
from txl_dist.config.plan import RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.engine import checkpoint, run_dir
from txl_dist.engine.checkpoint.size import checkpoint_bytes
from txl_dist.engine.init_from import InitSource, checked_source
from txl_dist.model.accounting import rank_memory_bytes
from txl_dist.process import preflight
from txl_dist.process.dist import World
from txl_dist.process.restarts import restart_line, take_exit_notes, tell_guard

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRequest:
    """What the command line asks of a run."""

    config: str
    """The run config's JSON file (path or URL)."""
    overrides: list[str]
    """`--set section.key=value` overrides, in order."""
    env_overrides: list[str]
    """TXL_SET's overrides, applied after `overrides`."""
    resume: str | None
    """`--resume`: "auto" (the run's latest checkpoint), a checkpoint's path, or None."""
    overwrite: bool
    """`--overwrite`: a fresh start moves another run in train.out_dir aside."""


@dataclass(frozen=True)
class Run:
    """What a run is made of before any process group; engine.assemble builds it."""

    config: RunConfig
    """The run config at this world size (RunConfig.at_world_size)."""
    world: World
    """Where this process sits in the job."""
    plan: RunPlan
    """config.plan(world size): batch layout and precision, checked."""
    point: checkpoint.ResumePoint | None
    """The checkpoint the run resumes from; None for a fresh start."""
    source: InitSource | None = None
    """train.init_from's weights for a fresh start; None when resuming, whose weights are its
    checkpoint's."""

    @property
    def start_step(self) -> int:
        """The step the run starts at: its resume point's, else 0."""
        return self.point.client.step if self.point else 0


def load_config(request: RunRequest, world: World) -> RunConfig:
    """The run config `request` names, its overrides applied; the guard told its run directory."""
    config = load_run_config(request.config, request.overrides, request.env_overrides)
    tell_guard(config.train.out_dir)
    if request.env_overrides and world.is_main:  # said once: a variable left set must be noticed
        keys = ", ".join(
            o.partition("=")[0] for o in request.env_overrides
        )  # values may be secrets
        log.info(f"TXL_SET overrides {keys}")
    return config


def prepare_run(configured: RunConfig, request: RunRequest, world: World) -> Run | None:
    """The run `configured` (load_config) makes on this world, its run directory claimed and
    checked; None where `--resume auto` finds it finished."""
    config = configured.at_world_size(world.world_size)
    if config.deepspeed != configured.deepspeed and world.is_main:
        _say_one_rank_stage(configured, config)
    plan = config.plan(world.world_size)  # the launcher's world size, before any group
    if request.resume is None:
        run_dir.claim(config.train.out_dir, request.overwrite, world.is_main)
    point = checkpoint.find_resume_point(request.resume, config.train.out_dir)
    for damaged in point.passed_over if point and world.is_main else ():
        log.warning(f"warning: {damaged}")
    if world.is_main:
        _say_why_restarted(config.train.out_dir, point)
    if request.resume == "auto" and _already_finished(point, config, world):
        return None
    # train.init_from seeds step 0 only: a resume continues from its checkpoint's weights.
    # Checked before preflight makes train.out_dir: a refusal leaves no empty run directory.
    source = checked_source(config) if point is None else None
    preflight.check_before_training(config, checkpoint_bytes(config))
    if point is not None and config.train.init_from and world.is_main:
        log.info(
            f"train.init_from={config.train.init_from} not loaded: resuming {point.tag}, "
            "whose weights continue the run"
        )
    return Run(config, world, plan, point, source)


def _say_one_rank_stage(configured: RunConfig, config: RunConfig) -> None:
    """Which ZeRO stage one rank runs for the configured one, and its memory."""
    plan = config.plan(1)
    estimate = rank_memory_bytes(
        config.model, config.zero_stage, 1, plan.micro_rows, plan.dtype_bytes
    )
    log.info(
        f"one rank: ZeRO-{configured.zero_stage} runs as ZeRO-{config.zero_stage}, the same "
        f"model states ({estimate / 2**30:.2f} GiB a rank by txl-inspect) without partition "
        "buckets (train.one_rank_stage)"
    )


def _say_why_restarted(out_dir: str, point: checkpoint.ResumePoint | None) -> None:
    """After a failure: which rank ended how (its guard's note) and where training resumes."""
    where = f"{point.tag} at step {point.client.step}" if point else "step 0 (no checkpoint yet)"
    line = restart_line(take_exit_notes(out_dir), where)
    if line:
        log.warning(line)


def _already_finished(
    point: checkpoint.ResumePoint | None, config: RunConfig, world: World
) -> bool:
    """A rerun of a run that reached train.max_steps says so instead of starting ranks (from
    another run's checkpoint, --resume PATH, a finished run still evaluates)."""
    if point is None or point.client.step < config.train.max_steps:
        return False
    if world.is_main:
        log.info(
            f"run {point.client.run_id} already finished: {point.tag} reached "
            f"train.max_steps={config.train.max_steps}; raise train.max_steps to train further"
        )
    return True
