"""Training throughput and per-rank model-state memory of the tiny config on 2 ranks, ZeRO 0-3.

    python bench/train_engine.py --data runs/data/wikitext-103 [--steps 40] [--nproc 2]

For each ZeRO stage and precision (bf16, fp32) it runs the real launcher
(`deepspeed --num_gpus N launch/pretrain.py`) and reads tokens/s and step time of the last log
window from metrics.jsonl. Then, per stage, it measures the bytes of model states held by each
rank (parameters or their ZeRO-3 partitions, gradients, fp32 master weights and Adam moments,
found by walking the engine's tensors, each storage counted once) next to txl-inspect's
ZeRO-paper estimate for mixed-precision Adam.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny.json"


def settings(data: str, out_dir: str, stage: int, dtype: str, steps: int) -> list[str]:
    values = [
        f"data.path={data}",
        f"train.out_dir={out_dir}",
        f"deepspeed.zero_optimization.stage={stage}",
        f"deepspeed.bf16.enabled={json.dumps(dtype == 'bf16')}",
        f"train.max_steps={steps}",
        f"logging.log_interval={steps // 2}",
        "train.eval_interval=0",
        "train.save_interval=0",
        "train.eval_rows=64",  # the unavoidable final evaluation, made short
        "data.test_split=null",
        "logging.wandb.mode=disabled",
    ]
    return [arg for value in values for arg in ("--set", value)]


def launcher(nproc: int, script: str, args: list[str]) -> list[str]:
    deepspeed = str(Path(sys.executable).parent / "deepspeed")
    return [deepspeed, "--num_gpus", str(nproc), script, *args]


def throughput(data: str, stage: int, dtype: str, steps: int, nproc: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = launcher(nproc, str(REPO / "launch/pretrain.py"), ["--config", str(TINY)])
        subprocess.run(
            cmd + settings(data, out, stage, dtype, steps),
            check=True,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        lines = Path(out, "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
    last = [r for r in rows if "split" not in r][-1]  # the steady-state window
    return {"tokens_per_s": last["tokens_per_s"], "step_ms": 1000 * last["step_time_s"]}


def memory(data: str, stage: int, nproc: int) -> list[int]:
    with tempfile.TemporaryDirectory() as out:
        args = ["--measure", "--config", str(TINY), *settings(data, out, stage, "bf16", 2)]
        proc = subprocess.run(
            launcher(nproc, __file__, args), check=True, cwd=REPO, capture_output=True, text=True
        )
    # Ranks print concurrently, so lines may run together: match the records, not lines.
    found = re.findall(r"MODEL_STATE_BYTES (\d+) (\d+)", proc.stdout)
    return [int(size) for _, size in sorted(found, key=lambda rank_size: int(rank_size[0]))]


def model_state_bytes(engine) -> int:
    """Bytes of every tensor the engine holds for parameters, gradients and optimizer states."""
    import torch

    seen: set[int] = set()
    total = 0

    def add(obj, depth: int = 0) -> None:
        nonlocal total
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif depth < 4 and isinstance(obj, (list, tuple)):
            for item in obj:
                add(item, depth + 1)
        elif depth < 4 and isinstance(obj, dict):
            for item in obj.values():
                add(item, depth + 1)

    for p in engine.module.parameters():
        add(p)
        add(p.grad)
        add(getattr(p, "ds_tensor", None))
    optimizer = engine.optimizer
    add(vars(optimizer))
    add(dict(getattr(optimizer, "optimizer", optimizer).state))
    return total


def built_trainer(argv: list[str]):
    """(config, world, Trainer) of this rank for pretrain's command line, started afresh."""
    from txl_dist.cli.pretrain import parse_args
    from txl_dist.config.loading import load_run_config
    from txl_dist.engine.assemble import build_trainer
    from txl_dist.engine.start import Run
    from txl_dist.process.dist import world_from_env

    args = parse_args(argv)
    config = load_run_config(args.config, args.set)
    world = world_from_env()
    plan = config.plan(world.world_size)
    return config, world, build_trainer(Run(config, world, plan, point=None))


def measure_in_process(argv: list[str]) -> None:
    """Runs under the launcher: two real training steps, then the census of this rank."""
    _, world, trainer = built_trainer(argv)
    batches = iter(trainer.streams)
    for _ in range(2):
        trainer.train_step(*next(batches))
    print(f"MODEL_STATE_BYTES {world.rank} {model_state_bytes(trainer.engine)}", flush=True)
    trainer.streams.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared WikiText-103 root")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()

    from txl_dist.cli.inspect_model import inspect_config

    print(f"tiny config, {args.nproc} ranks, CPU: throughput of the last {args.steps // 2} steps")
    print(f"{'ZeRO':>4} {'dtype':>5} {'tokens/s':>9} {'step ms':>8}")
    for stage in range(4):
        for dtype in ("bf16", "fp32"):
            r = throughput(args.data, stage, dtype, args.steps, args.nproc)
            print(f"{stage:>4} {dtype:>5} {r['tokens_per_s']:9.0f} {r['step_ms']:8.1f}", flush=True)

    estimate = inspect_config(str(TINY), args.nproc, [f"data.path={args.data}"])
    estimate = estimate.zero_bytes_per_rank
    print("\nmodel states per rank (bf16 + Adam), MiB: measured per rank | txl-inspect estimate")
    for stage in range(4):
        measured = memory(args.data, stage, args.nproc)
        ranks = " ".join(f"{b / 2**20:7.2f}" for b in measured)
        print(f"ZeRO-{stage}: {ranks} | {estimate[stage] / 2**20:7.2f}", flush=True)


def measure_or_launch(launch, measure) -> None:
    """A benchmark's entry: started by the deepspeed launcher (--measure, its --local_rank
    dropped) it measures in this process; started by hand, launch() starts the ranks."""
    if "--measure" in sys.argv:
        measure([a for a in sys.argv[1:] if a != "--measure" and not a.startswith("--local_rank")])
    else:
        launch()


if __name__ == "__main__":
    measure_or_launch(main, measure_in_process)
