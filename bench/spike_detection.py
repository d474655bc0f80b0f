"""What the training-health detectors cost per step on the tiny config, beside the step itself.

    OMP_NUM_THREADS=1 python bench/spike_detection.py --data runs/data/wikitext-103 [--steps 100]

One process runs the real training loop (`Trainer.run`, the tiny config as it is, bf16 ZeRO-2
taken to one rank's stage) with the spike detector and the step re-run on, their defaults. The
main thread's CPU time (time.thread_time: on a machine shared with other jobs, wall time mostly
measures the wait for a core) is summed over the training steps and over each detector part:

- the spike guard's per-step bookkeeping (the batch counted, the loss kept on the device) and
  its check every spikes.check_interval steps (one all-reduce on more ranks, none here);
- the re-run's per-step snapshot (memory references, RNG states, schedule, learning rates);
- the re-run's gradient hooks (each rank's sum of its own gradients): their work, timed as
  the same hook on every parameter's gradient once per micro-batch slot, outside backward.

A re-run itself happens only after a skipped update and costs one more step then; the periodic
replay is not run by the loop (docs/training.md states its cost: one step per interval).
"""

from __future__ import annotations

import argparse
import functools
import time

from train_engine import TINY, built_trainer


def timed(totals: dict[str, float], name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.thread_time() - start

    return wrapper


def hooks_seconds(trainer, repeats: int = 5) -> float:
    """CPU seconds the gradient hooks take for one step (every slot), a median of `repeats`."""
    import torch

    grads = [torch.randn_like(p) for p in trainer.engine.module.parameters() if p.requires_grad]
    runs = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(trainer.plan.accumulation):
            for grad in grads:
                trainer.reruns._seen(grad)
        runs.append(time.thread_time() - start)
    return sorted(runs)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared WikiText-103 root")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", default="/tmp/spike_detection_bench")
    args = parser.parse_args()
    settings = [
        f"data.path={args.data}",
        f"train.out_dir={args.out}",
        f"train.max_steps={args.steps}",
        "train.eval_interval=0",
        "train.save_interval=0",
        "data.valid_split=null",
        "data.test_split=null",
        "logging.wandb.mode=disabled",
    ]
    argv = ["--config", str(TINY), *(a for s in settings for a in ("--set", s)), "--overwrite"]
    _, _, trainer = built_trainer(argv)
    totals = {name: 0.0 for name in ("step", "guard per step", "guard check", "re-run snapshot")}
    trainer.train_step = timed(totals, "step", trainer.train_step)
    spikes, reruns = trainer.spikes, trainer.reruns
    spikes.batch = timed(totals, "guard per step", spikes.batch)
    spikes.add = timed(totals, "guard per step", spikes.add)
    spikes.check = timed(totals, "guard check", spikes.check)
    reruns._saved = timed(totals, "re-run snapshot", reruns._saved)
    trainer.run()
    step = totals.pop("step") / args.steps
    totals = {name: seconds / args.steps for name, seconds in totals.items()}
    hooks = hooks_seconds(trainer)
    # the step's time holds the hooks' (they run inside backward): the step without them
    bare = step - hooks
    print(f"tiny config, 1 process, CPU thread time over {args.steps} steps")
    print(f"training step without the detectors: {1000 * bare:8.2f} ms")
    for name, seconds in [*totals.items(), ("re-run gradient hooks", hooks)]:
        print(f"{name:>24}: {1000 * seconds:8.3f} ms  {100 * seconds / bare:6.3f} %")
    total = sum(totals.values()) + hooks
    print(f"{'all detectors':>24}: {1000 * total:8.3f} ms  {100 * total / bare:6.3f} %")


if __name__ == "__main__":
    main()
