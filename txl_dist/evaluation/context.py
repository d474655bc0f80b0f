"""How much context a model uses: sweep rows, effective context of one model, RECL of a group.

Both measures read a sweep: the same split scored at increasing context lengths c_1 < c_2 < ... (the
attention length for a memory sweep). They differ in what they compare:

- effective context (one model, from its mean losses): the shortest c whose loss is within
  `threshold` (relative) of the loss at the longest c. Khandelwal et al. (2018) measure context
  use this way; it is what "how much of its memory does this model need" asks.
- RECL (a model group, from per-token losses): Dai et al. (2019), "Transformer-XL", section 4.3
  "Relative Effective Context Length" and appendix C "Details About RECL" (arXiv:1901.02860).
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from txl_dist.evaluation.scores import score_of

RECL_THRESHOLD = 0.01  # the paper's: stop when the relative perplexity gain falls below 1%


@dataclass
class SweepRow:
    """One model at one length: a line of the table, a --json row, a CSV row."""

    model: str
    """The --model directory."""
    swept: str
    """Which length the sweep varies: mem_len or clamp_len."""
    context: int
    """The swept context: attn_len for mem_len sweeps (0 for a segment-alone row), clamp_len
    (-1: attn_len) for clamp_len."""
    tgt_len: int
    """Segment length."""
    mem_len: int
    """Memory length."""
    clamp_len: int
    """Relative distances clamped to this (-1: no clamp)."""
    same_length: bool
    """Every query attends to the same number of keys."""
    attn_len: int
    """The most tokens a prediction is conditioned on (`attention_length`)."""
    loss: float
    """Mean NLL per scored token (nats)."""
    ppl: float | None
    """exp(loss), for word-level data (else None)."""
    bpc: float | None
    """Bits per character, loss / ln 2, for char-level data (else None)."""
    tokens: int
    """Tokens scored."""
    segment_alone: bool = False
    """mem_len 0 of a same-length memory sweep, scored with the segment alone (causal, no memory,
    same_length off) as the sweep's no-memory baseline, at context 0."""

    @property
    def score(self) -> tuple[str, float | None]:
        """("ppl", value) or ("bpc", value), whichever the data's level gives."""
        return score_of(dataclasses.asdict(self))


SEGMENT_ALONE_MARK = "*"
"""How the table and the plot mark a segment-alone row."""
SEGMENT_ALONE_NOTE = (
    "the segment alone: no memory, causal attention within the segment (same_length off), "
    "taken as context 0"
)
"""What the mark means, under the table and in the plot."""


def attention_length(tgt_len: int, mem_len: int, same_length: bool) -> int:
    """The most tokens one prediction is conditioned on (its own input included).

    With same_length every query sees exactly mem_len keys (once a row has that much history);
    without, query i of a segment sees the memory and i + 1 segment tokens, at most
    mem_len + tgt_len (see txl_dist.model.attention.attention_mask).
    """
    return mem_len if same_length else mem_len + tgt_len


def check_lengths(mem_len: int, same_length: bool) -> None:
    """Refuse lengths the model cannot evaluate with."""
    if same_length and mem_len < 1:
        raise ValueError(
            f"mem_len {mem_len} with same_length: each query would attend to mem_len = no keys; "
            "use --same-length false to score with the segment alone"
        )


def effective_context(contexts: Sequence[int], losses: Sequence[float], threshold: float) -> int:
    """The shortest context whose loss is at most (1 + threshold) x the longest context's loss."""
    if len(contexts) != len(losses) or not contexts:
        raise ValueError("need one loss per context length, and at least one")
    longest = losses[int(np.argmax(contexts))]
    return min(c for c, loss in zip(contexts, losses) if loss <= longest * (1 + threshold))


def relative_gain(token_losses: np.ndarray, model: int, short: int, long: int, r: float) -> float:
    """g_i(c, c') of appendix C for model i = `model`, c = contexts[short], c' = contexts[long].

    token_losses[i, k, t] = l_i(c_k, t), the loss of model i on token t with context c_k.
    b(c, t) = min_i l_i(c, t) is the group's baseline; T the top-r positions with the largest
    b(c, t); f_i(c, c') = mean over T of min(b(c, t), l_i(c', t)); and
    g_i(c, c') = (exp f_i(c, c) - exp f_i(c, c')) / exp f_i(c, c).
    """
    baseline = token_losses[:, short].astype(np.float64).min(axis=0)  # b(c, t)
    top = max(1, round(r * baseline.size))
    hard = np.argsort(-baseline, kind="stable")[:top]  # T; ties keep corpus order
    b = baseline[hard]
    f_short = b.mean()  # f_i(c, c): min(b(c, t), l_i(c, t)) = b(c, t) since b is the minimum
    f_long = np.minimum(b, token_losses[model, long, hard]).mean()
    # (e^a - e^b) / e^a = 1 - e^(b - a): the same value without overflowing exp of a large loss
    return float(-np.expm1(f_long - f_short))


@dataclass
class Recl:
    """A model's relative effective context length at one r."""

    r: float
    """Fraction of hardest positions (largest baseline loss) the gain is measured on."""
    length: int
    """RECL: the first context c whose relative gain g(c, c') fell below the threshold."""
    capped: bool
    """The gain never fell below the threshold: the RECL is at least the longest context swept."""
    gains: list[float]
    """g(c_k, c_k+1) for every pair of consecutive contexts (the paper's Figure 3, normalized)."""


def recl(
    token_losses: np.ndarray, contexts: Sequence[int], r: float, threshold: float = RECL_THRESHOLD
) -> list[Recl]:
    """RECL of each model of a group, by appendix C's algorithm.

    token_losses: [models, contexts, tokens], every model scored on the same tokens at every
    context. The paper steps c' = c + delta; here c' is the next swept context, so sweep evenly
    spaced contexts (e.g. 100, 200, ...) for the paper's procedure:
      1. c = the shortest context, c' = the next one;
      2. if g_i(c, c') < threshold, RECL = c; otherwise c = c', c' = the next one, repeat.
    """
    n_models, n_contexts, _ = token_losses.shape
    if n_contexts != len(contexts) or list(contexts) != sorted(set(contexts)):
        raise ValueError(f"need one loss row per increasing context length, got {contexts}")
    if not 0 < r <= 1:
        raise ValueError(f"r must be in (0, 1], got {r}")
    out = []
    for i in range(n_models):
        gains = [relative_gain(token_losses, i, k, k + 1, r) for k in range(n_contexts - 1)]
        stop = next((k for k, g in enumerate(gains) if g < threshold), n_contexts - 1)
        out.append(Recl(r, int(contexts[stop]), stop == n_contexts - 1, gains))
    return out


CSV_FIELDS = [f.name for f in dataclasses.fields(SweepRow)]
# Columns that sweeps written before them lack: bpc (word-level, read as None) and segment_alone
# (no such row, read as False).
LATER_CSV_FIELDS = {"bpc", "segment_alone"}


def write_csv(rows: list[SweepRow], path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS)
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in rows)


def read_csv(path: str) -> list[SweepRow]:
    """Rows of a CSV written by `txl-eval --sweep-... --out`."""
    types = {
        "int": int, "float": float, "str": str, "bool": lambda v: v == "True",
        "float | None": lambda v: float(v) if v else None,  # DictWriter writes None as ""
    }  # fmt: skip
    kinds = {f.name: types[f.type] for f in dataclasses.fields(SweepRow)}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not _known_columns(reader.fieldnames or []):
            raise ValueError(
                f"{path} is not a txl-eval sweep CSV: its columns are {reader.fieldnames}, "
                f"expected {CSV_FIELDS}; write it with txl-eval --sweep-mem-len ... --out FILE"
            )
        return [SweepRow(**{k: kinds[k](row.get(k, "")) for k in CSV_FIELDS}) for row in reader]


def _known_columns(names: list[str]) -> bool:
    """The columns of a sweep CSV, of this version or of one before a later column."""
    lacking = set(CSV_FIELDS) - set(names)
    return lacking <= LATER_CSV_FIELDS and names == [f for f in CSV_FIELDS if f not in lacking]
