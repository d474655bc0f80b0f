"""What txl-report reads of a run's metrics.jsonl: the series it draws, the events it marks
(restarts, stragglers, rollbacks, transient faults) and the summary lines it prints of them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from data_pipeline.limits import METADATA_BYTES
from data_pipeline.received import received_lines
from txl_dist.evaluation.scores import score_of


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
    scores: dict[str, Series] = field(default_factory=dict)
    """Evaluation score per split (and per corpus of a mix, as "valid wiki"): perplexity, or
    bits per character (char-level data)."""
    score: str = "ppl"
    """Which score the evaluation rows hold: ppl or bpc."""
    run_id: str | None = None
    """The run drawn (None: rows from before runs had ids)."""
    restarts: list[int] = field(default_factory=list)
    """First step logged by each restart of the run."""
    stragglers: list[dict] = field(default_factory=list)
    """The run's straggler records: ranks named slow (docs/training.md, Slow ranks)."""
    rollbacks: list[dict] = field(default_factory=list)
    """The run's rollbacks from loss spikes, as metrics.jsonl records them."""
    faults: list[dict] = field(default_factory=list)
    """The run's transient faults: a step trained again, a rank's result changed."""


def read_metrics(path: str, run_id: str | None = None) -> RunMetrics:
    """Training rows (loss, lr, tokens_per_s) and evaluation rows (split, ppl or bpc) of one run:
    run_id, or the run of the file's last row."""
    lines = received_lines(path, METADATA_BYTES, "metrics log")  # a received run's too
    rows = [_row(line, path, n) for n, line in enumerate(lines, 1) if line.strip()]
    runs = [row.get("run_id") for row in rows]
    if run_id is not None and run_id not in runs:
        known = ", ".join(dict.fromkeys(r for r in runs if r)) or "none"
        raise ValueError(f"{path} holds no run {run_id} (runs: {known})")
    metrics = RunMetrics(run_id=run_id or (runs[-1] if runs else None))
    restart = 0
    for row in rows:
        if row.get("run_id") != metrics.run_id:
            continue
        step = row["step"]
        if row.get("restart", 0) != restart:
            restart = row.get("restart", 0)
            metrics.restarts.append(step)
        if row.get("event") == "straggler":
            metrics.stragglers.append(row)
        elif row.get("event") == "rollback":
            metrics.rollbacks.append(row)
        elif row.get("event") == "transient_fault":
            metrics.faults.append(row)
        elif "split" in row:
            metrics.score, value = score_of(row)
            # A mix's corpora each get their own line beside the split's (their mean).
            name = " ".join(row[k] for k in ("split", "corpus") if k in row)
            metrics.scores.setdefault(name, Series()).add(step, value)
        else:
            metrics.loss.add(step, row.get("loss"))
            metrics.lr.add(step, row.get("lr"))
            metrics.tokens_per_s.add(step, row.get("tokens_per_s"))
    return metrics


# What a row's drawn keys must hold where present: numbers (null: not logged), a text.
NUMBERS = ("step", "restart", "loss", "lr", "tokens_per_s", "ppl", "bpc")
TEXTS = ("run_id", "split", "corpus")


def _row(line: bytes, path: str, number: int) -> dict:
    """One line of metrics.jsonl, refused in one line naming the line and key unless it is an
    object with a step whose drawn values are numbers (a received run's file may be anything)."""
    try:
        row = json.loads(line)
    except ValueError:
        row = None
    where, fix = f"{path} line {number}", ": fix or remove that line"
    if not isinstance(row, dict) or "step" not in row:
        raise ValueError(f"{where} is not a metrics record (a JSON object with a step){fix}")
    for key in NUMBERS:
        value = row.get(key, 0)
        if not (value is None and key != "step") and (
            isinstance(value, bool) or not isinstance(value, (int, float))
        ):
            raise ValueError(f"{where}: {key} {value!r:.40} is not a number{fix}")
    for key in TEXTS:
        if not isinstance(row.get(key, ""), (str, type(None))):
            raise ValueError(f"{where}: {key} {row[key]!r:.40} is not a text{fix}")
    return row


def summary(metrics: RunMetrics) -> list[str]:
    """The run's events in words, one line each: stragglers, rollbacks, transient faults."""
    return [
        *straggler_lines(metrics),
        *(rollback_line(r) for r in metrics.rollbacks),
        *(fault_line(f) for f in metrics.faults),
    ]


def straggler_lines(metrics: RunMetrics) -> list[str]:
    """One summary line per rank named slow, as the red dotted lines on the tokens/s panel."""
    return [
        f"straggler at step {s['step']}: rank {s['rank']} (host {s['host']}) {s['section']} "
        f"{s['seconds'] / s['median_s']:.2f}x the ranks' median"
        for s in metrics.stragglers
    ]


def rollback_line(r: dict) -> str:
    """One rollback in words, for the report's summary."""
    return (
        f"rollback: loss spike at step {r['spike_step']} (loss {r['spike_loss']:.4f}, median "
        f"{r['spike_median']:.4f}), restored step {r['restored_step']}, skipped data positions "
        f"{r['skipped_first']}-{r['skipped_last']}"
    )


def fault_line(f: dict) -> str:
    """One transient fault in words, for the report's summary."""
    ranks = ", ".join(map(str, f["ranks"]))
    return (
        f"transient fault at step {f['step']} on rank {ranks}: the step trained again, its "
        "second attempt kept"
    )
