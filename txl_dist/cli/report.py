"""txl-report: a PNG of a run's metrics.jsonl, or of txl-eval sweeps, for users without wandb.

    txl-report RUN_DIR [--out FILE]                  (default RUN_DIR/report.png)
    txl-report --sweep FILE.csv [FILE.csv ...] [--out FILE]   (default FILE.png beside the first)
    python -m txl_dist.cli.report ...

A run: four panels against the step: training loss, evaluation perplexity (one line per split;
bits per character for char-level data, as its metrics.jsonl records them),
learning rate and training tokens/s, with a dashed line where the run was restarted and a red
dotted one where it rolled back from a loss spike (each rollback also said in a line: its
restored step and skipped data), a purple dash-dot one where a transient fault made a step
train again (its rank said in a line) or, on the tokens/s panel, where a rank was named a
straggler (also printed, one line each). A resumed or rolled-back run may log a step again;
the later record wins. Only one run is drawn: the directory's latest (the run of the last
row), or `--run ID`. Reading the file and the summary lines: cli/run_metrics.py.
Sweeps (`txl-eval --sweep-mem-len ... --out FILE.csv`): perplexity (bits per character for
char-level data) against the swept context (attention length, or clamp length), one line per
model, each model's effective context marked (and a same-length sweep's segment-alone row at
context 0).
Needs matplotlib: pip install 'txl-dist[plot]'.
"""

from __future__ import annotations

import argparse
import os
import sys

from txl_dist.cli import USAGE_ERROR, interruptible
from txl_dist.cli.run_metrics import RunMetrics, read_metrics, summary
from txl_dist.evaluation.context import (
    RECL_THRESHOLD,
    SEGMENT_ALONE_MARK,
    SEGMENT_ALONE_NOTE,
    SweepRow,
    effective_context,
    read_csv,
)
from txl_dist.evaluation.scores import LABELS
from txl_dist.files import open_new

METRICS_FILE = "metrics.jsonl"
REPORT_FILE = "report.png"


def plot(metrics: RunMetrics, out: str, title: str) -> dict[str, dict]:
    """Draw the run; return what the panels hold, {title: {label: (steps, values)}}, read back
    from matplotlib."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [
        (axes[0, 0], "training loss", {"train": metrics.loss}),
        (axes[0, 1], f"evaluation {LABELS[metrics.score]}", metrics.scores),
        (axes[1, 0], "learning rate", {"lr": metrics.lr}),
        (axes[1, 1], "tokens/s", {"train": metrics.tokens_per_s}),
    ]
    for ax, name, series in panels:
        for label, s in series.items():
            steps, values = s.xy()
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, label=label)
        for step in metrics.restarts:
            ax.axvline(step, color="grey", linestyle="--", linewidth=1)
        for s in metrics.stragglers if name == "tokens/s" else ():  # where steps slowed down
            ax.axvline(s["step"], color="red", linestyle=":", label=f"straggler rank {s['rank']}")
        for rollback in metrics.rollbacks:
            ax.axvline(rollback["spike_step"], color="red", linestyle=":", linewidth=1)
        for fault in metrics.faults:  # the step trained again: a purple dash-dot line
            ranks = ", ".join(map(str, fault["ranks"]))
            ax.axvline(fault["step"], color="purple", linestyle="-.", label=f"fault rank {ranks}")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if series:
            ax.legend()
    if metrics.score == "ppl":  # perplexity spans orders of magnitude; bpc does not
        axes[0, 1].set_yscale("log")
    for ax in axes[1]:
        ax.set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    save(fig, out)
    drawn = {
        ax.get_title(): {
            line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.get_lines()
            if not line.get_label().startswith("_")  # restart markers
        }
        for ax in axes.flat
    }
    plt.close(fig)
    return drawn


def sweep_curves(paths: list[str]) -> dict[str, list[SweepRow]]:
    """Rows of the sweep CSVs by model, each ordered by context (a model in two files: both)."""
    curves: dict[str, list[SweepRow]] = {}
    for path in paths:
        by_model: dict[str, list[SweepRow]] = {}
        for row in read_csv(path):
            by_model.setdefault(row.model, []).append(row)
        for model, rows in by_model.items():
            label = model if model not in curves else f"{model} ({os.path.basename(path)})"
            curves[label] = sorted(rows, key=lambda r: r.context)
    swept = {r.swept for rows in curves.values() for r in rows}
    if len(swept) > 1:
        raise ValueError(f"{paths} mix sweeps of {sorted(swept)}: plot one kind at a time")
    scores = {r.score[0] for rows in curves.values() for r in rows}
    if len(scores) > 1:
        raise ValueError(f"{paths} mix perplexity and bits per character: plot one level")
    if not curves:
        raise ValueError(f"{paths} hold no rows")
    return curves


def plot_sweep(curves: dict[str, list[SweepRow]], out: str, threshold: float) -> dict:
    """Draw the curves; return what the axes hold, {label: (x, y)}, read back from matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    label_of_score = LABELS[next(iter(curves.values()))[0].score[0]]
    for label, rows in curves.items():
        x, y = [r.context for r in rows], [r.score[1] for r in rows]
        (line,) = ax.plot(x, y, marker="o", label=label)
        effective = effective_context(x, [r.loss for r in rows], threshold)
        ax.scatter(  # a marker, not a line: the axes keep one line per model
            [effective], [y[x.index(effective)]], s=140, facecolors="none",
            edgecolors=line.get_color(), zorder=3,
        )  # fmt: skip
        for r in rows:
            if r.segment_alone:
                ax.annotate(
                    f"mem_len 0{SEGMENT_ALONE_MARK}", (r.context, r.score[1]),
                    textcoords="offset points", xytext=(6, 6),
                )  # fmt: skip
    swept = next(iter(curves.values()))[0].swept
    ax.set_xlabel("attention length (tokens)" if swept == "mem_len" else "clamp length (tokens)")
    ax.set_ylabel(label_of_score)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)  # flat curves: no "+1.05e3"
    ax.set_title(
        f"{label_of_score} by context (circled: effective context, loss within {threshold:.0%})"
    )
    ax.grid(alpha=0.3)
    ax.legend()
    if any(r.segment_alone for rows in curves.values() for r in rows):
        ax.text(
            0.01, 0.01, f"{SEGMENT_ALONE_MARK} {SEGMENT_ALONE_NOTE}", transform=ax.transAxes,
            fontsize=7, alpha=0.8,
        )  # fmt: skip
    fig.tight_layout()
    save(fig, out)
    drawn = {
        line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
        for line in ax.get_lines()
    }
    plt.close(fig)
    return drawn


def save(fig, out: str) -> None:
    """Write the figure to out (its format from the name), never through a link planted there."""
    with open_new(out, "wb") as f:
        fig.savefig(f, format=os.path.splitext(out)[1][1:] or None, dpi=100)


@interruptible("txl-report")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txl-report", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", help="run directory holding metrics.jsonl")
    parser.add_argument("--sweep", nargs="+", metavar="CSV", help="txl-eval sweep CSV files")
    parser.add_argument(
        "--threshold", type=float, default=RECL_THRESHOLD,
        help="--sweep: effective-context threshold, as txl-eval's (default 0.01)",
    )  # fmt: skip
    parser.add_argument("--run", metavar="ID", help="the run to draw (default: the latest)")
    parser.add_argument("--out", help=f"PNG to write (default RUN_DIR/{REPORT_FILE})")
    args = parser.parse_args(argv)
    if (args.run_dir is None) == (args.sweep is None):
        parser.error("pass a run directory or --sweep FILE.csv ..., not both")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("txl-report: error: needs matplotlib: pip install 'txl-dist[plot]'", file=sys.stderr)
        return USAGE_ERROR
    if args.sweep:
        return _report_sweep(args.sweep, args.out, args.threshold)
    path = os.path.join(args.run_dir, METRICS_FILE)
    if not os.path.exists(path):
        print(f"txl-report: error: {path} not found: pass a run directory", file=sys.stderr)
        return USAGE_ERROR
    try:
        metrics = read_metrics(path, args.run)
    except ValueError as err:
        print(f"txl-report: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    out = args.out or os.path.join(args.run_dir, REPORT_FILE)
    title = os.path.basename(os.path.abspath(args.run_dir))
    plot(metrics, out, f"{title} (run {metrics.run_id})" if metrics.run_id else title)
    for line in summary(metrics):
        print(line)
    print(f"wrote {out}")
    return 0


def _report_sweep(paths: list[str], out: str | None, threshold: float) -> int:
    try:
        curves = sweep_curves(paths)
    except (OSError, ValueError) as err:
        print(f"txl-report: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    out = out or os.path.splitext(paths[0])[0] + ".png"
    plot_sweep(curves, out, threshold)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
