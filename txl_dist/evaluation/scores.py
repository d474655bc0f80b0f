"""What a mean loss reads as: perplexity on word-level data, bits per character on char-level.

The level is the data's (the manifest's `level`, written by txl-prepare; a checkpoint and an
export carry it on), never guessed from the dataset's name. Every surface that shows a loss
(the engine's log line, metrics.jsonl, wandb, txl-eval, txl-report, the export's README) names
its score through here, so they agree.
"""

from __future__ import annotations

import math

SCORE_OF_LEVEL = {"word": "ppl", "subword": "ppl", "char": "bpc"}
"""The score each data level reports beside the loss. Manifests, checkpoints and exports name
subword data subword (older ones word: reported_level), so a perplexity per subword token is not
taken for one per word."""

TOKEN_OF_LEVEL = {"word": "word", "subword": "subword token", "char": "character"}
"""What a token is at each level: what a loss and a perplexity are per."""

LABELS = {"ppl": "perplexity", "bpc": "bits per character"}
"""Long names of the scores, for plot titles."""


def reported_level(recorded: str, subword: bool) -> str:
    """The level to report of data whose manifest or checkpoint records ``recorded``: subword
    where a tokenizer.json reads it (those written before the subword level record word)."""
    return "subword" if subword else recorded


def score_name(level: str) -> str:
    """`ppl` for word-level data, `bpc` for char-level."""
    try:
        return SCORE_OF_LEVEL[level]
    except KeyError:
        raise ValueError(
            f"data level {level!r} is not one of {', '.join(SCORE_OF_LEVEL)}"
        ) from None


def score(loss: float, level: str) -> dict[str, float]:
    """{"ppl": exp(loss)} for word level, {"bpc": loss / ln 2} for char level (loss in nats)."""
    name = score_name(level)
    if name == "bpc":
        return {name: loss / math.log(2)}
    return {name: safe_exp(loss)}


def safe_exp(x: float) -> float:
    """exp(x), inf where math.exp would overflow (a diverged run's perplexity)."""
    return math.exp(x) if x < 700 else float("inf")


def score_of(record: dict) -> tuple[str, float | None]:
    """(name, value) of the score a metrics record holds: bpc if it has one (not None), else ppl
    (None when it has neither)."""
    name = "bpc" if record.get("bpc") is not None else "ppl"
    return name, record.get(name)


def format_score(record: dict, width: int = 0, digits: int | None = None) -> str:
    """`ppl 123.45` or `bpc 1.0612`, whichever `record` holds, right-aligned in `width`;
    `digits` after the point (default 2 for ppl, 4 for bpc)."""
    name, value = score_of(record)
    if digits is None:
        digits = 4 if name == "bpc" else 2
    return f"{name} {value:{width}.{digits}f}"
