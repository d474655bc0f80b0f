"""txl-report: a PNG of a run's metrics.jsonl, for users without wandb.

    txl-report RUN_DIR [--out FILE]        (default RUN_DIR/report.png)
    python -m txl_dist.report RUN_DIR

Four panels against the step: training loss, evaluation perplexity (one line per split),
learning rate and training tokens/s. Needs matplotlib: pip install 'txl-dist[plot]'.
A resumed run may log a step again; the later record wins.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

METRICS_FILE = "metrics.jsonl"
REPORT_FILE = "report.png"


@dataclass
class Series:
    """Values of one metric by step (a later record for a step replaces the earlier one)."""

    points: dict[int, float] = field(default_factory=dict)

    def add(self, step: int, value: float | None) -> None:
        if value is not None:
            self.points[step] = value

    def xy(self) -> tuple[list[int], list[float]]:
        steps = sorted(self.points)
        return steps, [self.points[s] for s in steps]


@dataclass
class RunMetrics:
    """The series txl-report draws."""

    loss: Series = field(default_factory=Series)
    lr: Series = field(default_factory=Series)
    tokens_per_s: Series = field(default_factory=Series)
    ppl: dict[str, Series] = field(default_factory=dict)
    """Evaluation perplexity per split."""


def read_metrics(path: str) -> RunMetrics:
    """Training rows (loss, lr, tokens_per_s) and evaluation rows (split, ppl) of a run."""
    metrics = RunMetrics()
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            step = row["step"]
            if "split" in row:
                metrics.ppl.setdefault(row["split"], Series()).add(step, row.get("ppl"))
            else:
                metrics.loss.add(step, row.get("loss"))
                metrics.lr.add(step, row.get("lr"))
                metrics.tokens_per_s.add(step, row.get("tokens_per_s"))
    return metrics


def plot(metrics: RunMetrics, out: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [
        (axes[0, 0], "training loss", {"train": metrics.loss}),
        (axes[0, 1], "evaluation perplexity", metrics.ppl),
        (axes[1, 0], "learning rate", {"lr": metrics.lr}),
        (axes[1, 1], "tokens/s", {"train": metrics.tokens_per_s}),
    ]
    for ax, name, series in panels:
        for label, s in series.items():
            steps, values = s.xy()
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, label=label)
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if series:
            ax.legend()
    axes[0, 1].set_yscale("log")
    for ax in axes[1]:
        ax.set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txl-report", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="run directory holding metrics.jsonl")
    parser.add_argument("--out", help=f"PNG to write (default RUN_DIR/{REPORT_FILE})")
    args = parser.parse_args(argv)
    path = os.path.join(args.run_dir, METRICS_FILE)
    if not os.path.exists(path):
        print(f"txl-report: error: {path} not found: pass a run directory", file=sys.stderr)
        return 1
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("txl-report: error: needs matplotlib: pip install 'txl-dist[plot]'", file=sys.stderr)
        return 1
    out = args.out or os.path.join(args.run_dir, REPORT_FILE)
    plot(read_metrics(path), out, os.path.basename(os.path.abspath(args.run_dir)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
