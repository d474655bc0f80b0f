"""Where the engine's time goes: the bare model step next to our training loop, step by step.

    python bench/engine_overhead.py --data runs/data/wikitext-103 [--steps 60] [--nproc 1 2]

For the tiny config and a larger one (4 layers, d_model 256, 8 heads x 32, d_inner 1024,
tgt_len = mem_len = 128) on 1 process and on 2 ranks (the DeepSpeed launcher, gloo), each rank
runs the real training loop (`Trainer.run`, fp32 ZeRO-0 by default) and, right after each engine
step, a bare step on the same batch: the same model in plain PyTorch with the same micro-batch
slots and memories, forward + backward + gradient clipping + the same optimizer, no DeepSpeed,
no collectives. Both share the machine's load step by step, so their ratio holds on a busy
machine. Timers around the parts of the loop (exclusive: a part's time excludes the parts timed
inside it) break the engine's step down; the loop's own data wait is its metrics' data_wait_s.
Prints per config and world size: ms per step of each part, the bare step's, and
engine / bare throughput (bare ms / engine ms; 1.0 means no overhead).

--clock cpu times the main thread's CPU time instead of wall time, with one intra-op thread per
rank (OMP_NUM_THREADS=1), so the main thread does all the model's work: on a machine shared
with other jobs wall times mostly measure the wait for a core, CPU times do not. It leaves out
what other threads do (data prefetch) and time spent blocked (collective waits).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from train_engine import REPO, TINY, built_trainer, launcher, settings

CONFIGS = {
    "tiny": [],
    "larger": [
        "model.n_layer=4",
        "model.n_head=8",
        "model.d_head=32",
        "model.d_model=256",
        "model.d_embed=256",
        "model.d_inner=1024",
        "model.tgt_len=128",
        "model.mem_len=128",
    ],
}
WARMUP = 5  # steps before the timers start: first segments without memory, allocator warm-up
LOG_INTERVAL = 20  # the tiny config's: log lines cost what they cost in a real run
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "barrier",
)


class Sections:
    """Exclusive wall time per named part: time spent in a part nested inside another counts
    for the inner part only. Off until `start()`."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[list] = []  # [name, started, nested seconds]
        self.on = False

    def start(self) -> None:
        self.seconds.clear()
        self.on = True

    @contextlib.contextmanager
    def part(self, name: str):
        self.stack.append([name, self.clock(), 0.0])
        try:
            yield
        finally:
            name, started, nested = self.stack.pop()
            spent = self.clock() - started
            if self.stack:
                self.stack[-1][2] += spent
            if self.on:
                self.seconds[name] += spent - nested

    def wrap(self, owner, attribute: str, name: str) -> None:
        """Time every call of owner.attribute (set on the instance or module) as `name`."""
        inner = getattr(owner, attribute)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            with self.part(name):
                return inner(*args, **kwargs)

        setattr(owner, attribute, timed)


class BareStep:
    """The model step without an engine: plain PyTorch on this rank's batch, same slots."""

    def __init__(self, config, engine, micro: int, accum: int, sections: Sections):
        from txl_dist.engine.deepspeed_setup import build_optimizer
        from txl_dist.model import TransformerXL

        dtype = next(engine.module.parameters()).dtype  # bf16 engines train bf16 modules
        self.model = TransformerXL(config.model).to(dtype).train()
        self.optimizer = build_optimizer(self.model, config)
        self.clip = config.ds.gradient_clipping
        self.micro, self.accum, self.sections = micro, accum, sections
        self.mems = [None] * accum

    def __call__(self, input_ids, targets) -> None:
        import torch

        for slot in range(self.accum):
            rows = slice(slot * self.micro, (slot + 1) * self.micro)
            with self.sections.part("bare forward"):
                out = self.model(input_ids[rows], targets[rows], self.mems[slot])
                loss = out.loss.float().mean() / self.accum
            with self.sections.part("bare backward"):
                loss.backward()
            self.mems[slot] = out.mems
        with self.sections.part("bare clip + optimizer"):
            if self.clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)


def instrument(trainer, sections: Sections) -> None:
    """Timers around the loop's parts, on the instances the loop calls (nothing else changes)."""
    engine = trainer.engine
    sections.wrap(engine, "forward", "DeepSpeed forward wrapper")
    sections.wrap(engine.module, "forward", "model forward (in engine)")
    sections.wrap(engine, "backward", "DeepSpeed backward (autograd + hooks)")
    sections.wrap(engine, "step", "DeepSpeed step wrapper")
    base = getattr(engine.optimizer, "optimizer", engine.optimizer)
    sections.wrap(base, "step", "optimizer step (in engine)")
    sections.wrap(trainer.memory, "get", "memory bank")
    sections.wrap(trainer.memory, "set", "memory bank")
    sections.wrap(trainer.health.nonfinite, "add", "non-finite counter")
    sections.wrap(trainer.stop, "agreed", "stop agreement")
    sections.wrap(trainer, "_log_train", "log lines")


def wrap_collectives(sections: Sections) -> None:
    """Before the engine is built: DeepSpeed keeps references to some of these functions."""
    import torch.distributed as dist

    for name in COLLECTIVES:
        sections.wrap(dist, name, "collectives (launch or blocking wait)")


def wrap_shared_memory_kernel(sections: Sections) -> None:
    """Once DeepSpeed has loaded it: the kernel that CPU ranks on one machine use for sums and
    gathers (process.shm_collectives), looked up at each call."""
    import torch

    if hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        sections.wrap(
            torch.ops.deepspeed, "inference_all_reduce_", "collectives (launch or blocking wait)"
        )


def measure_in_process(argv: list[str]) -> None:
    """Runs on each rank: Trainer.run with a bare step after each engine step; prints a record."""
    clock = time.thread_time if "--cpu-clock" in sys.argv else time.perf_counter
    sections = Sections(clock)
    wrap_collectives(sections)
    config, world, trainer = built_trainer(argv)
    wrap_shared_memory_kernel(sections)
    bare = BareStep(
        config, trainer.engine, trainer.plan.micro_rows, trainer.plan.accumulation, sections
    )
    instrument(trainer, sections)
    steps = config.train.max_steps - WARMUP
    marks = {"steps": 0, "bare": 0.0}
    engine_step = trainer.train_step

    def train_step(input_ids, targets):
        with sections.part("Trainer.train_step (own Python)"):
            loss = engine_step(input_ids, targets)
        started = clock()
        bare(input_ids, targets)
        marks["steps"] += 1
        if marks["steps"] == WARMUP:
            sections.start()
            marks["from"] = clock()
        elif marks["steps"] > WARMUP:
            marks["bare"] += clock() - started
        return loss

    trainer.train_step = train_step
    save = trainer.checkpoints.save

    def save_checkpoint(*state):  # the loop's end: train.save_interval=0 saves only there
        marks.setdefault("to", clock())
        return save(*state)

    trainer.checkpoints.save = save_checkpoint
    trainer.run()
    seconds = dict(sections.seconds)
    bare_ms = sum(v for k, v in seconds.items() if k.startswith("bare")) * 1000 / steps
    engine_ms = ((marks["to"] - marks["from"]) - marks["bare"]) * 1000 / steps
    parts = {k: v * 1000 / steps for k, v in seconds.items() if not k.startswith("bare")}
    parts["loop rest (data wait, timing, Python)"] = engine_ms - sum(parts.values())
    record = dict(
        rank=world.rank,
        engine_ms=engine_ms,
        bare_ms=bare_ms,
        parts=parts,
        bare_parts={k: v * 1000 / steps for k, v in seconds.items() if k.startswith("bare")},
    )
    print("OVERHEAD " + json.dumps(record), flush=True)


def run(data: str, name: str, nproc: int, steps: int, stage: int, dtype: str, cpu: bool):
    """One measurement (a fresh process per rank); each rank's record and the loop's data wait."""
    with tempfile.TemporaryDirectory() as out:
        args = ["--measure", "--config", str(TINY), *settings(data, out, stage, dtype, steps)]
        args += ["--cpu-clock"] if cpu else []
        args += [a for value in CONFIGS[name] for a in ("--set", value)]
        args += [
            "--set",
            "data.valid_split=null",
            "--set",
            f"logging.log_interval={min(LOG_INTERVAL, steps)}",
        ]
        # One process as a user starts one (`python launch/pretrain.py`), two with the launcher.
        one = [sys.executable, __file__, *args]
        cmd = one if nproc == 1 else launcher(nproc, __file__, args)
        env = {**os.environ, "OMP_NUM_THREADS": "1"} if cpu else None
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        metrics = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    # Ranks print concurrently, so lines may run together: match the records, not lines.
    records = [json.loads(r) for r in re.findall(r"OVERHEAD (\{.*?\}\})", proc.stdout)]
    windows = [m["data_wait_s"] for m in metrics if "split" not in m]
    return sorted(records, key=lambda r: r["rank"]), 1000 * sum(windows) / len(windows)


def report(name: str, nproc: int, records: list[dict], data_wait_ms: float) -> None:
    first = records[0]
    print(f"\n{name} config, {nproc} process(es): ms per step (rank 0; exclusive times)")
    for part, ms in sorted(first["parts"].items(), key=lambda kv: -kv[1]):
        print(f"  {ms:8.2f}  {part}")
    print(
        f"  {data_wait_ms:8.2f}  data wait, wall clock (metrics data_wait_s), part of the loop rest"
    )
    for part, ms in first["bare_parts"].items():
        print(f"  {ms:8.2f}  {part}")
    for r in records:
        ratio = r["bare_ms"] / r["engine_ms"]
        print(
            f"  rank {r['rank']}: engine {r['engine_ms']:.1f} ms, bare {r['bare_ms']:.1f} ms, "
            f"engine/bare throughput {ratio:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared WikiText-103 root")
    parser.add_argument("--steps", type=int, default=60, help="timed steps (after 5 warm-up)")
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--stage", type=int, default=0, help="ZeRO stage")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    print(f"ZeRO-{args.stage} {args.dtype}, {args.steps} timed steps, {args.clock} clock, CPU")
    for name in args.configs:
        for nproc in args.nproc:
            records, data_wait = run(
                args.data,
                name,
                nproc,
                args.steps + WARMUP,
                args.stage,
                args.dtype,
                args.clock == "cpu",
            )
            report(name, nproc, records, data_wait)


if __name__ == "__main__":
    if "--measure" in sys.argv:
        flags = ("--measure", "--cpu-clock")
        measure_in_process(
            [a for a in sys.argv[1:] if a not in flags and not a.startswith("--local_rank")]
        )
    else:
        main()
