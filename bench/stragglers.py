"""What straggler detection costs a training step: its timers and its exchange, on 2 gloo ranks.

    python bench/stragglers.py [--steps 2000] [--interval 50] [--step-ms 690]

Two processes (gloo, as the CPU runs) each run `--steps` steps of the detector's hooks around
empty sections (three timed sections and a timed reduction a step, `step_done` each step, the
all_gather and the scoring every `--interval` steps), then the same steps with no detector. The
difference per step is the detection's cost; against `--step-ms`, the tiny config's step on 2
CPU ranks (its metrics' step_time_s; 690 ms on the 2-core test machine under load, 2026-12-06),
it is the overhead. Prints per rank: microseconds a step for hooks alone, for an exchange, and
the share of a step. The sections' bodies are empty, so the figures are the detector's own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from txl_dist.config.stragglers import StragglerConfig  # noqa: E402
from txl_dist.engine.health.stragglers import StragglerDetector  # noqa: E402


class _Engine:
    """Only what the detector wraps: the gradient reduction (here empty)."""

    def allreduce_gradients(self) -> None:
        pass


class _World:
    def __init__(self, rank: int):
        self.rank, self.world_size = rank, 2


def _loop(detector: StragglerDetector, engine: _Engine, steps: int) -> float:
    """Seconds for `steps` steps of hooks around empty sections."""
    start = time.perf_counter()
    for step in range(1, steps + 1):
        with detector.timed("data"):
            pass
        with detector.timed("forward_backward"):
            engine.allreduce_gradients()
        with detector.timed("optimizer"):
            pass
        detector.step_done(step)
    return time.perf_counter() - start


def _rank(rank: int, port: int, args: argparse.Namespace, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    config = StragglerConfig(interval=args.interval)
    cpu = torch.device("cpu")
    engine = _Engine()  # its reduction timed by the detector
    detector = StragglerDetector.of(config, _World(rank), cpu, engine, lambda r, line: None)
    off = StragglerDetector(StragglerConfig(enabled=False), 2, cpu, None)
    with_detector = _loop(detector, engine, args.steps)
    without = _loop(off, _Engine(), args.steps)
    exchanges = args.steps // args.interval
    # The exchange alone: all_gather and scoring, timed apart from the hooks.
    clock = detector.clock
    start = time.perf_counter()
    for _ in range(exchanges):
        clock.step_done()
        detector.judge(detector._exchange(), 0)
    per_exchange = (time.perf_counter() - start) / max(exchanges, 1)
    results[rank] = ((with_detector - without) / args.steps, per_exchange)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--interval", type=int, default=StragglerConfig().interval)
    parser.add_argument("--step-ms", type=float, default=690.0, help="the training step's ms")
    args = parser.parse_args()
    results = mp.Manager().dict()
    port = 29500 + os.getpid() % 1000
    mp.spawn(_rank, args=(port, args, results), nprocs=2, join=True)
    for rank in sorted(results):
        per_step, per_exchange = results[rank]
        share = 100 * per_step / (args.step_ms / 1000)
        hooks = per_step - per_exchange / args.interval
        print(
            f"rank {rank}: {per_step * 1e6:.1f} us a step: hooks {hooks * 1e6:.1f} us, an "
            f"exchange {per_exchange * 1e6:.0f} us every {args.interval} steps; "
            f"{share:.3f}% of a {args.step_ms:.0f} ms step"
        )


if __name__ == "__main__":
    main()
