"""Distributed evaluation: every token of a split scored exactly once, NLL summed over ranks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from tqdm import tqdm

from data_pipeline import IGNORE_INDEX, TokenStreams
from txl_dist.evaluation.scores import safe_exp


@dataclass
class EvalResult:
    """Loss and perplexity of one split."""

    loss: float
    """Mean NLL per token (nats)."""
    ppl: float
    """exp(loss): word-level perplexity for word-level vocabularies."""
    tokens: int
    """Tokens scored (over all ranks)."""
    seconds: float
    """Wall-clock time of the evaluation."""
    corpora: dict[str, EvalResult] = field(default_factory=dict)
    """For a mix (data.mix), each corpus's result; this one is their token-weighted mean."""


def token_weighted(results: dict[str, EvalResult]) -> EvalResult:
    """The corpora's results together: loss averaged over all their tokens, times added."""
    tokens = sum(r.tokens for r in results.values())
    loss = sum(r.loss * r.tokens for r in results.values()) / tokens
    seconds = sum(r.seconds for r in results.values())
    return EvalResult(loss, safe_exp(loss), tokens, seconds, corpora=dict(results))


@torch.no_grad()
def evaluate(
    model,
    streams: TokenStreams,
    device: torch.device,
    progress: bool,
    on_batch: Callable[[], None] = lambda: None,
) -> EvalResult:
    """Score `streams` (a tail=True stream) with `model` in its current lengths; all ranks join.
    `on_batch` is called after each batch (the hang watchdog's progress)."""
    start = time.perf_counter()
    nll_sum = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    mems = None
    # A live bar on a terminal only (disable=None): in a log file its carriage returns pile up.
    batches = tqdm(
        streams,
        total=streams.steps_per_epoch,
        desc="eval",
        disable=None if progress else True,
        mininterval=0.5,
    )
    for input_ids, targets in batches:
        input_ids, targets = input_ids.to(device), targets.to(device)
        out = model(input_ids, targets, mems)
        scored = targets != IGNORE_INDEX
        nll_sum += out.loss.double().masked_fill(~scored, 0).sum()  # no boolean index: no sync
        count += scored.sum()
        mems = out.mems
        on_batch()
    if dist.is_initialized():
        dist.all_reduce(nll_sum)
        dist.all_reduce(count)
    loss = (nll_sum / count.clamp(min=1)).item()
    return EvalResult(loss, safe_exp(loss), int(count.item()), time.perf_counter() - start)
