"""The `data` section: where the prepared dataset is (or the corpora of a weighted mix), how
its documents are ordered and how its shards are read."""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

from data_pipeline import ORDERS, Retry


@dataclasses.dataclass
class MixCorpus:
    """One corpus of a weighted mix (data.mix)."""

    name: str
    """Short name: the key of mix_tokens and the corpus field of its evaluation rows."""
    path: str
    """Root URL of its dataset prepared by txl-prepare."""
    weight: float
    """Share of the training tokens, relative to the other corpora's weights."""


@dataclasses.dataclass
class DataConfig:
    """Where the prepared dataset is (or the weighted corpora) and how documents are ordered."""

    path: str | None = None
    """Root URL of a dataset prepared by txl-prepare (any fsspec URL or local path)."""
    mix: list[MixCorpus] | None = None
    """Instead of path: corpora mixed by weight, every row still one stream (docs/own-corpora)."""
    dataset: str = "wikitext-103"
    """Name of the corpus, recorded with checkpoints and exports."""
    order: str = "corpus"
    """Document order per epoch: corpus (WikiText) or a seeded shuffle (lm1b)."""
    train_split: str = "train"
    """Split trained on."""
    valid_split: str | None = "valid"
    """Split of the periodic and final evaluation; null skips them."""
    test_split: str | None = "test"
    """Split of the final evaluation; null skips it."""
    storage_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """fsspec storage options (e.g. S3 endpoint_url, key, secret)."""
    read_attempts: int = 6
    """Tries per HTTP/S3 read of a shard or manifest before a reset, 5xx or stall is an error."""
    read_timeout_s: float = 60.0
    """Seconds a remote connect or read may stall before that try counts as failed."""

    def __post_init__(self) -> None:
        self.check_sources()
        if self.order not in ORDERS:
            names = " or ".join(map(repr, ORDERS))
            raise ValueError(f"data.order must be {names}, got {self.order!r}")
        if self.read_attempts < 1 or self.read_timeout_s <= 0:
            raise ValueError(
                f"data.read_attempts must be >= 1 and data.read_timeout_s > 0, got "
                f"{self.read_attempts} and {self.read_timeout_s}"
            )

    def check_sources(self) -> None:
        """Exactly one of path and mix; a mix has unique names and finite positive weights whose
        sum is a normal float (the draw's thresholds divide by it)."""
        if self.path is None and self.mix is None:
            raise ValueError("missing key data.path (or data.mix, a list of corpora to mix)")
        if self.path is not None and self.mix is not None:
            raise ValueError("data.path and data.mix are both set; keep one of them")
        if self.mix is None:
            return
        if not self.mix:
            raise ValueError("data.mix is empty; list at least one {name, path, weight}")
        names = [c.name for c in self.mix]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"data.mix names must be unique, {', '.join(twice)} appears twice")
        for i, corpus in enumerate(self.mix):
            if not (math.isfinite(corpus.weight) and corpus.weight > 0):
                raise ValueError(
                    f"data.mix[{i}].weight must be a finite number > 0, got {corpus.weight}"
                )
        total = sum(c.weight for c in self.mix)
        if not sys.float_info.min <= total <= sys.float_info.max:
            weights = ", ".join(str(c.weight) for c in self.mix)
            raise ValueError(
                f"data.mix weights ({weights}) sum to {total}, beyond the range of normal "
                "floats; give them as shares such as 0.7 and 0.3"
            )

    @property
    def root(self) -> str:
        """The dataset root, or the first mixed corpus's (mixed corpora share one vocabulary)."""
        return self.path if self.mix is None else self.mix[0].path

    def retry(self) -> Retry:
        """How shard and manifest reads ride out a flaky store."""
        return Retry(attempts=self.read_attempts, timeout_s=self.read_timeout_s)
