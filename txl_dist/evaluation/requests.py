"""What the harness model (txl_dist.harness.lm) computes for its requests, on a loaded model:
a document's rolling log-likelihood, continuations scored after their context's memory, and
the batches of equally long contexts they are scored in.

Ids come in already encoded (with the line start a request begins after): reading an export's
text is the caller's, so this module needs the model only.
"""

from __future__ import annotations

import numpy as np
import torch

from data_pipeline import IGNORE_INDEX, TextBatches
from txl_dist.evaluation.loop import evaluate
from txl_dist.model import TransformerXL

Pair = tuple[list[int], list[int]]
"""A loglikelihood request's (context ids, continuation ids)."""


def rolling_loglikelihood(model: TransformerXL, ids: np.ndarray, device: torch.device) -> float:
    """Log-likelihood of every token of `ids` but the first, one stream scored as txl-eval
    scores a text file with one row: segments of the model's tgt_len, memory carried."""
    if len(ids) < 2:  # an empty document: nothing to score
        return 0.0
    batches = TextBatches(ids, rows=1, tgt_len=model.config.tgt_len)
    result = evaluate(model, batches, device, progress=False)
    return -result.loss * result.tokens


def same_context_length(pairs: list[Pair], batch_size: int) -> list[list[int]]:
    """Indices of `pairs` in batches of at most batch_size whose contexts are equally long."""
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    batches: list[list[int]] = []
    for i in order:
        last = batches[-1] if batches else None
        if last and len(last) < batch_size and len(pairs[last[0]][0]) == len(pairs[i][0]):
            last.append(i)
        else:
            batches.append([i])
    return batches


@torch.no_grad()
def score_continuations(
    model: TransformerXL, pairs: list[Pair], device: torch.device
) -> list[tuple[float, bool]]:
    """(log-likelihood, greedy) of each continuation after its context; contexts equally
    long. The context's inputs (all its tokens but the last) fill the memory first."""
    tgt_len = model.config.tgt_len
    contexts = torch.tensor([context for context, _ in pairs], device=device)
    mems = None
    for start in range(0, contexts.size(1) - 1, tgt_len):
        # Targets only so the model computes losses, not log-probabilities over the vocabulary.
        segment = contexts[:, start : start + tgt_len + 1]
        mems = model(segment[:, :-1], segment[:, 1:], mems).mems
    inputs, targets = _continuations(pairs)
    inputs, targets = inputs.to(device), targets.to(device)
    total = torch.zeros(len(pairs), dtype=torch.float64, device=device)
    greedy = torch.ones(len(pairs), dtype=torch.bool, device=device)
    for start in range(0, inputs.size(1), tgt_len):
        cols = slice(start, start + tgt_len)
        out = model(inputs[:, cols], mems=mems)
        mems, wanted = out.mems, targets[:, cols]
        scored = wanted != IGNORE_INDEX
        picked = out.log_probs.gather(-1, wanted.clamp(min=0)[..., None])[..., 0]
        total += torch.where(scored, picked.double(), 0.0).sum(1)
        greedy &= ((out.log_probs.argmax(-1) == wanted) | ~scored).all(1)
    return list(zip(total.tolist(), greedy.tolist()))


def _continuations(pairs: list[Pair]) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of the continuations, one row each: a row's inputs start with its
    context's last token; targets past a shorter continuation's end are IGNORE_INDEX."""
    width = max(1, max(len(continuation) for _, continuation in pairs))
    inputs = torch.zeros(len(pairs), width, dtype=torch.int64)
    targets = torch.full((len(pairs), width), IGNORE_INDEX, dtype=torch.int64)
    for row, (context, continuation) in enumerate(pairs):
        n = len(continuation)
        inputs[row, :n] = torch.tensor([context[-1], *continuation[:-1]][:n])
        targets[row, :n] = torch.tensor(continuation, dtype=torch.int64)
    return inputs, targets
