"""The pretrain command: its arguments handed over (engine.start, engine.assemble), the run, how
it ends: exit code, closing lines, the stop file.

    deepspeed [--num_gpus N] launch/pretrain.py --config C [--set section.key=value ...]
        [--resume auto|PATH] [--overwrite] [--stop-file PATH] [--verbose]

Also runs under torchrun, srun and plain python (launch/pretrain.py calls `main`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from typing import NoReturn

import torch.distributed as dist

from data_pipeline import redact_text
from txl_dist.checkpoint_names import CHECKPOINT_DIR
from txl_dist.cli import FAILED, USAGE_ERROR
from txl_dist.config.loading import naming_txl_set
from txl_dist.engine import checkpoint, run_dir
from txl_dist.engine.assemble import build_trainer
from txl_dist.engine.health.rollback import LossSpikeError
from txl_dist.engine.health.stragglers import STRAGGLER_EXIT_CODE
from txl_dist.engine.start import RunRequest, load_config, prepare_run
from txl_dist.engine.summary import closing_summary
from txl_dist.engine.train import Trainer
from txl_dist.files import open_new
from txl_dist.logs import configure_logging
from txl_dist.process.dist import World, end_distributed, world_from_env
from txl_dist.schema import ConfigError
from txl_dist.stop_note import write_stop_note

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pretrain",
        description="Pretrain Transformer-XL.",
        epilog="TXL_SET in the environment adds whitespace-separated section.key=value overrides "
        "applied after --set (e.g. TXL_SET='train.max_steps=3' for a smoke test).",
    )
    parser.add_argument("--config", required=True, help="run config JSON (path or URL)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (JSON-parsed), e.g. --set train.max_steps=100",
    )
    parser.add_argument(
        "--resume", default=None, help="auto (the run's latest) or a checkpoint path"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh even if train.out_dir holds another run: move that run aside to "
        "OUT_DIR.old-TIME (nothing is deleted)",
    )
    parser.add_argument(
        "--stop-file",
        default=None,
        metavar="PATH",
        help="after an early stop (stop signal or train.max_wallclock) has checkpointed, rank 0 "
        "writes the step and reason here as JSON; batch scripts requeue the job on it",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show DeepSpeed's INFO and WARNING lines and wandb's banner and run history",
    )
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # deepspeed
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    world = world_from_env()
    configure_logging(world.is_main, args.verbose)
    env_set = os.environ.get("TXL_SET", "").split()
    request = RunRequest(args.config, args.set, env_set, args.resume, args.overwrite)
    trainer = _start(request, world)
    if trainer is None:  # --resume auto of a run that reached train.max_steps
        return
    stopped_early = _train(trainer, world)
    if stopped_early and args.stop_file and world.is_main:
        checkpoints = os.path.join(trainer.config.train.out_dir, CHECKPOINT_DIR)
        slow_hosts = sorted({s.host for s in trainer.stragglers.stopped})
        write_stop_note(args.stop_file, trainer.step, stopped_early, checkpoints, slow_hosts)
    end_distributed()
    if world.is_main:
        _summarize(trainer, stopped_early)
    if stopped_early and trainer.stragglers.stopped:  # checkpointed; requeued without the host
        sys.exit(STRAGGLER_EXIT_CODE)


def _start(request: RunRequest, world: World) -> Trainer | None:
    """This rank's Trainer (engine.start, then engine.assemble); None where the run already
    finished. A bad start ends the process: USAGE_ERROR with one line, else FAILED."""
    config = None
    try:
        config = load_config(request, world)
        run = prepare_run(config, request, world)
        return None if run is None else build_trainer(run)
    except tuple(STARTUP_ERRORS) as err:  # one clear line from rank 0; others quiet
        if world.is_main:
            kind = next(name for cls, name in STARTUP_ERRORS.items() if isinstance(err, cls))
            line = redact_text(f"{kind}: {naming_txl_set(str(err), request.env_overrides)}")
            print(line, file=sys.stderr, flush=True)
        sys.exit(USAGE_ERROR)
    except Exception as err:  # noqa: BLE001 - every failure ends in one line per rank
        _fail(err, world, config.train.out_dir if config else None)


def _train(trainer: Trainer, world: World) -> str | None:
    """trainer.run(): why it stopped early, or None; a failure ends the process (FAILED)."""
    try:
        return trainer.run()
    except checkpoint.CheckpointSaveError as err:  # every rank raised it: one line, from rank 0
        if world.is_main:
            print(f"checkpoint error: {err}", file=sys.stderr, flush=True)
        sys.exit(FAILED)
    except LossSpikeError as err:  # every rank decided it on the same numbers: one line
        if world.is_main:
            print(f"loss spikes: {err}", file=sys.stderr, flush=True)
        sys.exit(FAILED)
    except Exception as err:  # noqa: BLE001
        _fail(err, world, trainer.config.train.out_dir)


# Errors found before training starts, and how their one line begins.
STARTUP_ERRORS = {
    ConfigError: "config error",
    run_dir.RunDirError: "run directory error",
    checkpoint.UnsafeCheckpointError: "checkpoint error",  # refused before anything unpickled
    checkpoint.DamagedCheckpointError: "checkpoint error",
    checkpoint.CheckpointStateError: "checkpoint error",  # a txl.json of the wrong shape
}


def _fail(err: Exception, world: World, out_dir: str | None) -> NoReturn:
    """End this rank with one line: which rank, the error, where its traceback is (FAILED).

    Launchers interleave every rank's output, and a traceback per rank buries the cause; the
    traceback (secrets redacted) goes to OUT_DIR/errors/rankR.txt instead.
    """
    where = _keep_traceback(redact_text("".join(traceback.format_exception(err))), out_dir, world)
    if isinstance(err, dist.DistBackendError):  # a peer ended first: its own line says why
        what = "lost contact with another rank (see the first failing rank's line)"
    else:
        what = f"{type(err).__name__}: {redact_text(str(err))}"
    log.error(f"rank {world.rank} failed: {what} ({where})")
    sys.exit(FAILED)


def _keep_traceback(trace: str, out_dir: str | None, world: World) -> str:
    """Write the traceback to OUT_DIR/errors/rankR.txt; says where it is, for the one line."""
    if out_dir is not None:
        path = os.path.join(out_dir, "errors", f"rank{world.rank}.txt")
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open_new(path) as f:
                f.write(trace)
            return f"traceback: {path}"
    print(trace, file=sys.stderr, flush=True)  # no run directory to keep it in
    return "traceback above"


def _summarize(trainer: Trainer, stopped_early: str | None) -> None:
    """The run's closing lines (engine.summary); its checkpoint is the one of its last step."""
    train = trainer.config.train
    tag = checkpoint.tag_for(trainer.step)
    for line in closing_summary(
        step=trainer.step,
        max_steps=train.max_steps,
        stopped_early=stopped_early,
        evaluations=trainer.metrics.evaluations,
        checkpoint=os.path.join(train.out_dir, CHECKPOINT_DIR, tag),
    ):
        log.info(line)
