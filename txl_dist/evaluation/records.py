"""A training run's evaluation as it is logged: its metrics record and its console line, for a
mix each corpus's and then their token-weighted mean."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from txl_dist.evaluation.loop import EvalResult
from txl_dist.evaluation.scores import format_score, score

Log = Callable[[dict[str, Any], str], None]
"""engine.metrics.Metrics.log: a record and its console line, written from rank 0."""


def log_evaluation(log: Log, step: int, split: str, result: EvalResult, level: str) -> None:
    """Log `result` of `split` at `step` (data of `level`): a mix's corpora, then their mean."""
    for corpus, part in result.corpora.items():
        record = eval_record(step, split, part, level, corpus=corpus)
        log(record, eval_line(record))
    record = eval_record(step, split, result, level)
    log(record, eval_line(record))


def eval_record(
    step: int, split: str, result: EvalResult, level: str, **extra: Any
) -> dict[str, Any]:
    """The metrics record of one evaluation: loss, its score at `level`, tokens and speed."""
    return dict(
        step=step,
        split=split,
        **extra,
        loss=result.loss,
        **score(result.loss, level),
        tokens=result.tokens,
        tokens_per_s=result.tokens / max(result.seconds, 1e-9),
    )


def eval_line(r: dict[str, Any]) -> str:
    corpus = f" {r['corpus']}" if "corpus" in r else ""  # one corpus of a mix
    return (
        f"eval {r['split']}{corpus} step {r['step']} | loss {r['loss']:.4f} | "
        f"{format_score(r)} | {r['tokens']} tokens | {r['tokens_per_s']:.0f} tok/s"
    )
