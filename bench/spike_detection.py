"""What the training-health detectors cost per step together on the tiny config, beside the step.

    OMP_NUM_THREADS=1 python bench/spike_detection.py --data runs/data/wikitext-103 [--steps 100]

One process runs the real training loop (`Trainer.run`, the tiny config as it is, bf16 ZeRO-2
taken to one rank's stage) with every detector on, their defaults, and the straggler clock on
as on several ranks. The main thread's CPU time (time.thread_time: on a machine shared with
other jobs, wall time mostly measures the wait for a core) is summed over the training steps
and over each detector part, every entry point of engine/health/monitor.py:

- the spike guard's per-step bookkeeping (the batch counted, the loss kept on the device, the
  non-finite count) and its check every spikes.check_interval steps (one all-reduce on more
  ranks, none here);
- the straggler clock: its three timed sections a step and its step end (the exchange every
  stragglers.interval steps is a collective of several ranks: bench/stragglers.py);
- the re-run's per-step snapshot (memory references, RNG states, schedule, learning rates) and
  its check before the update (the ranks' loss and gradient sum gathered, the verdict);
- the re-run's gradient hooks (each rank's sum of each gradient): their work, timed as the same
  hook on every parameter's gradient once per micro-batch slot, outside backward.

The step without the detectors is the step's time less the parts timed inside it. A re-run
itself happens only where a step is suspect and costs one more step then; the periodic replay
(spikes.replay_interval, off by default) costs one step per interval: --replay N measures it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time

from train_engine import TINY, built_trainer

from txl_dist.engine.health.stragglers import SectionClock


def timed(totals: dict[str, float], name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.thread_time() - start

    return wrapper


def timed_context(totals: dict[str, float], name: str, fn):
    """`fn(section)`'s context manager, its entry and exit timed into totals[name] (and into
    totals["inside the step"] for the sections inside train_step: all but data)."""

    def add(seconds: float, section: str) -> None:
        totals[name] += seconds
        if section != "data":
            totals["inside the step"] += seconds

    @contextlib.contextmanager
    def wrapper(section: str):
        start = time.thread_time()
        manager = fn(section)
        manager.__enter__()
        add(time.thread_time() - start, section)
        try:
            yield
        finally:
            start = time.thread_time()
            manager.__exit__(None, None, None)
            add(time.thread_time() - start, section)

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
                trainer.health.reruns._seen(grad)
        trainer.health.reruns.sums = []
        runs.append(time.thread_time() - start)
    return sorted(runs)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared WikiText-103 root")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--replay", type=int, default=0, help="spikes.replay_interval")
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
        f"spikes.replay_interval={args.replay}",
    ]
    argv = ["--config", str(TINY), *(a for s in settings for a in ("--set", s)), "--overwrite"]
    _, _, trainer = built_trainer(argv)
    health, parts = trainer.health, ("step", "spike guard", "straggler clock", "re-run snapshot")
    totals = dict.fromkeys([*parts, "re-run check", "inside the step"], 0.0)
    if health.stragglers.clock is None:  # one rank: the clock as several ranks run it
        health.stragglers.clock = SectionClock()
    calls, step_fn = [], trainer.train_step  # a replayed step calls train_step twice
    trainer.train_step = timed(totals, "step", lambda *a: calls.append(1) or step_fn(*a))
    entries = [("batch", "spike guard"), ("stepped", "spike guard"),
               ("rolled_back", "spike guard"), ("before_update", "re-run check")]  # fmt: skip
    for name, part in entries:
        setattr(health, name, timed(totals, part, getattr(health, name)))
    health.timed = timed_context(totals, "straggler clock", health.timed)
    health.reruns._saved = timed(totals, "re-run snapshot", health.reruns._saved)
    trainer.run()
    per_step = {name: seconds / args.steps for name, seconds in totals.items()}
    hooks = hooks_seconds(trainer)
    # the step's time holds the hooks', the clock's inner sections' and the check before the
    # update's (they run inside it): the step without them
    inside = hooks + per_step["re-run check"] + per_step.pop("inside the step")
    bare = per_step.pop("step") - inside
    print(f"tiny config, 1 process, CPU thread time over {args.steps} steps")
    print(f"training step without the detectors: {1000 * bare:8.2f} ms")
    for name, seconds in [*per_step.items(), ("re-run gradient hooks", hooks)]:
        print(f"{name:>24}: {1000 * seconds:8.3f} ms  {100 * seconds / bare:6.3f} %")
    total = sum(per_step.values()) + hooks
    print(f"{'all detectors':>24}: {1000 * total:8.3f} ms  {100 * total / bare:6.3f} %")
    if len(calls) > args.steps:  # the steps' time holds the replays': a share of it
        share = (len(calls) - args.steps) / len(calls)
        print(f"{'replays':>24}: {len(calls) - args.steps} steps trained twice, {100 * share:.1f} %"
              " of the steps' time (counted in the step above)")  # fmt: skip


if __name__ == "__main__":
    main()
