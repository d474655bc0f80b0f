"""The training time a checkpoint save costs: synchronous against asynchronous saves.

    python bench/checkpoint_stall.py [--raw ../shared/data/wikitext-103] [--stages 2 3]
                                     [--saves 3] [--save-every 8] [--ranks 2] [--threads N]

wt103_base at its real size (151M parameters: the shipped vocabulary of 267,735 words, which the
WikiText-103 train prefix in --raw fills with its own ~32k words, the rest never seen), bf16, on
--ranks ranks (2) of the real launcher (`deepspeed --num_gpus 2 launch/pretrain.py`'s loop,
gloo), the batch shrunk to one row per rank. For each ZeRO stage one run trains
(2 x saves + 3) x save-every steps with a save every save-every steps, synchronous and
asynchronous saves taking turns (train.async_save switched before each): both meet the same
machine, whose speed drifts from minute to minute in a shared VM. --threads sets each rank's
compute threads (OMP_NUM_THREADS; unset: the machine's cores shared among the ranks):
`--ranks 1 --threads 1` on 2 cores leaves a core to the background write, as a GPU node's host
cores are while its GPUs compute. Each rank times its steps, its save calls and, through the
checkpointer's after_phase hook, when `latest` moved; rank 0 prints per save, the mean of each
mode's:

  call    the save's call on the training loop (for an asynchronous save, the snapshot)
  wait    the optimizer updates' waits for the background serialization (part of `after`)
  after   what the steps after the save took beyond the run's median step (of those after no
          save): as many steps after each save, whichever its mode, as the most that ran
          beside an asynchronous save's background write (they share the cores with it; a
          synchronous save's next steps may run slower too); summed with their signs, so
          that noise cancels
  stall   the training time the save cost: call + after
  wall    from the save's call until `latest` named it

The first two saves (one of each, in the run's warm-up: its steps still slow down for minutes)
and the end-of-run save are not counted. Prints the date and machine first; `--json` adds one
JSON line per run (with each counted save's mode, the window of steps counted after each save
and every step).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from train_engine import REPO, built_trainer, launcher, measure_or_launch

WT103_BASE = REPO / "configs" / "wt103_base.json"
VOCABULARY = 267_735  # wt103_base's model.n_token
COLUMNS = ("call", "wait", "after", "stall", "wall")
WARM_UP_SAVES = 2  # one of each mode, not counted: the run's first minutes are slower
VALID_BYTES = 100_000  # the prefix's valid split: the runs never evaluate, txl-prepare wants one


def prepare_data(raw: Path, work: Path) -> Path:
    """The raw train prefix prepared with wt103_base's vocabulary size: the prefix's own words
    first (txl-prepare's order), then never-seen fillers."""
    src = work / "src"
    src.mkdir(parents=True)
    (src / "wiki.train.tokens").symlink_to((raw / "wiki.train.tokens").resolve())
    with open(raw / "wiki.valid.tokens", encoding="utf-8") as f:
        (src / "wiki.valid.tokens").write_text(f.read(VALID_BYTES).rsplit("\n", 1)[0] + "\n")
    own = _prepare(src, work / "own", [])
    words = (own / "vocab.txt").read_text(encoding="utf-8").splitlines()
    fillers = [f"<unseen-{i}>" for i in range(VOCABULARY - len(words))]
    (work / "vocab.txt").write_text("\n".join(words + fillers) + "\n", encoding="utf-8")
    return _prepare(src, work / "wt103", ["--vocab", str(work / "vocab.txt")])


def _prepare(src: Path, out: Path, extra: list[str]) -> Path:
    from data_pipeline.cli import main as prepare_main

    args = ["--dataset", "wikitext-103", "--source", str(src), "--out", str(out), *extra]
    if prepare_main([*args, "--no-progress"]) != 0:
        sys.exit(f"txl-prepare failed on {src}")
    return out


def settings(data: Path, out: Path, stage: int, every: int, steps: int, ranks: int):
    values = [
        f"data.path={data}",
        "data.valid_split=null",
        "data.test_split=null",
        f"train.out_dir={out}",
        f"train.global_rows={ranks}",
        "train.max_micro_rows=1",
        f"train.max_steps={steps}",
        f"train.save_interval={every}",
        "train.eval_interval=0",
        "train.keep_last=2",
        "train.async_save=true",  # the snapshot's memory reserved after a step, as in a real run
        f"deepspeed.zero_optimization.stage={stage}",
        "logging.log_interval=1000",
        "logging.wandb.mode=disabled",
    ]
    return [arg for value in values for arg in ("--set", value)]


def run(data: Path, stage: int, args: argparse.Namespace) -> dict:
    """One launcher run; rank 0's record of it."""
    every = args.save_every
    steps = (2 * args.saves + WARM_UP_SAVES + 1) * every  # and the end-of-run save
    env = {**os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})}
    with tempfile.TemporaryDirectory(dir=REPO / "runs") as out:
        argv = ["--measure", "--config", str(WT103_BASE)]
        argv += settings(data, Path(out), stage, every, steps, args.ranks)
        cmd = launcher(args.ranks, __file__, argv)
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"ZeRO-{stage} failed:\n{proc.stderr[-3000:]}")
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("STALL ")]
    return json.loads(line.removeprefix("STALL "))


def measure_in_process(argv: list[str]) -> None:
    """Runs under the launcher: the real loop, its steps, save calls and publishes timed."""
    config, world, trainer = built_trainer(argv)
    steps, calls, waits, published, modes = [], [], [], {}, []
    reserved = []  # rank 0's host memory held for snapshots at the first asynchronous save

    def timed(record, work):
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return work(*args, **kwargs)
            finally:
                record.append((started, time.perf_counter()))

        return call

    checkpoints = trainer.checkpoints
    save = timed(calls, checkpoints.save)

    def save_in_turn(*args, **kwargs):
        checkpoints.async_save = len(modes) % 2 == 1  # sync first, then async, and so on
        modes.append("async" if checkpoints.async_save else "sync")
        if checkpoints.async_save and not reserved:
            reserved.append(checkpoints.budget.reserved_bytes)
        return save(*args, **kwargs)

    trainer.train_step = timed(steps, trainer.train_step)
    checkpoints.save = save_in_turn
    checkpoints.before_update = timed(waits, checkpoints.before_update)

    def after_phase(phase: str, step: int) -> None:
        if phase == "publish":
            published[step] = time.perf_counter()

    checkpoints.after_phase = after_phase
    trainer.run()
    if world.is_main:
        every = config.train.save_interval
        record = stalls(steps, calls, waits, published, modes, every, config.train.max_steps)
        record.update(snapshot_gib=checkpoints.budget.snapshot_bytes() / 2**30)
        record.update(reserved_gib=reserved[0] / 2**30)
        print("STALL " + json.dumps(record), flush=True)


def stalls(steps, calls, waits, published, modes, every: int, max_steps: int) -> dict:
    """Per counted save (neither the warm-up's nor the end of run's): its mode, stall and wall
    time (see the docstring)."""
    counted = [j for j in range(WARM_UP_SAVES, len(calls)) if every * (j + 1) < max_steps]
    writes = {j: (calls[j][1], published[every * (j + 1)]) for j in counted}

    def during(start: float, write: tuple[float, float]) -> bool:
        return write[0] <= start < write[1]

    # The steps after each save counted against it, whichever its mode: as many as the most
    # that ran beside a background write (a synchronous save's next steps may run slower too).
    beside = [sum(during(s, writes[j]) for s, _ in steps) for j in counted if modes[j] == "async"]
    window = max(1, *beside)
    after = {j: [k for k, (s, _) in enumerate(steps) if s >= calls[j][1]][:window] for j in counted}
    in_windows = {k for ks in after.values() for k in ks}
    alone = [e - s for k, (s, e) in enumerate(steps) if k >= 2 and k not in in_windows]
    base = statistics.median(alone)  # the first steps warm up
    record = {key: [] for key in ("call_s", "wait_s", "after_s", "stall_s", "wall_s")}
    for j in counted:
        call_start, call_end = calls[j]
        ks = after[j]
        record["call_s"].append(call_end - call_start)
        record["wait_s"].append(sum(e - s for s, e in waits if during(s, writes[j])))
        # Signed: a step faster than the median offsets a slower one, as noise does with no
        # save at all; summing only the excesses would count noise as stall.
        record["after_s"].append(sum(steps[k][1] - steps[k][0] - base for k in ks))
        record["stall_s"].append(record["call_s"][-1] + record["after_s"][-1])
        record["wall_s"].append(writes[j][1] - call_start)
    every_step = [e - s for s, e in steps]
    mode = [modes[j] for j in counted]
    return dict(step_s=base, window=window, mode=mode, **record, steps_s=every_step)


def cpu_model() -> str:
    """The processor's name (Linux), else what platform knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", default=str(REPO.parent / "shared" / "data" / "wikitext-103"))
    parser.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--saves", type=int, default=3, help="saves counted per mode")
    parser.add_argument("--save-every", type=int, default=8, help="steps between saves")
    parser.add_argument("--ranks", type=int, default=2, help="ranks, one row each")
    parser.add_argument("--threads", type=int, help="compute threads per rank (OMP_NUM_THREADS)")
    parser.add_argument("--json", action="store_true", help="also print each run's record")
    args = parser.parse_args()

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{now}, {platform.node()}: {os.cpu_count()} x {cpu_model()}")
    threads = f", {args.threads} compute threads each" if args.threads else ""
    print(
        f"wt103_base bf16, {args.ranks} rank(s) (gloo){threads}, 1 row per rank, "
        f"a save every {args.save_every} steps"
    )
    print("seconds per save, the mean of each mode's; step: the median step with no write running")
    columns = ("ZeRO", "save", "step", *COLUMNS)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, (4, 5, 6, 6, 6, 6, 6, 6), strict=True)))
    os.makedirs(REPO / "runs", exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "runs") as work:
        data = prepare_data(Path(args.raw), Path(work))
        for stage in args.stages:
            r = run(data, stage, args)
            for mode in ("sync", "async"):
                mine = [j for j, m in enumerate(r["mode"]) if m == mode]
                mean = {k: statistics.mean(r[f"{k}_s"][j] for j in mine) for k in COLUMNS}
                figures = " ".join(f"{v:6.2f}" for v in (r["step_s"], *mean.values()))
                print(f"{stage:>4} {mode:>5} {figures}", flush=True)
            print(
                f"     rank 0's snapshot {r['snapshot_gib']:.2f} GiB; host memory reserved for it "
                f"before its first asynchronous save: {r['reserved_gib']:.2f} GiB"
            )
            if args.json:
                print(json.dumps(dict(stage=stage, **r)), flush=True)


if __name__ == "__main__":
    measure_or_launch(main, measure_in_process)
