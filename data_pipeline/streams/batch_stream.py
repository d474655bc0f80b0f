"""``BatchStream``: the contract of a training stream, which ``TokenStreams`` (one corpus) and
``MixedStreams`` (a mix) both keep and the trainer, its checkpoints and its logs rely on."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import torch

from data_pipeline.shards.errors import VocabMismatchError
from data_pipeline.shards.format import Manifest
from data_pipeline.streams.prefetch import Prefetcher


class BatchStream(ABC):
    """Batches ``(input_ids, targets)``, int64 ``[rows, tgt_len]``, for one rank, whose rows
    continue from batch to batch; read ahead by a Prefetcher (``active``, None when idle)."""

    active: Prefetcher | None = None
    """The prefetch thread of the iteration under way; None when idle."""
    manifest: Manifest
    """Describes the vocabulary the ids refer to (a mix's corpora share one) and the level."""
    rows: int
    """Rows per rank: a batch's first dimension."""
    epoch: int
    """Epoch of the batch last yielded."""
    step: int
    """Step of the batch last yielded (-1 before the first)."""
    new_epoch: bool
    """The batch last yielded starts an epoch: the caller resets its memory."""

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches from the saved position on (``load_state_dict``, or the start)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Position of the next batch, the same on every rank and independent of the world size
        (for a given number of global rows)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position; ValueError for another stream's state."""

    @property
    def vocab_size(self) -> int:
        """Vocabulary size the token ids refer to."""
        return self.manifest.vocab_size

    def mix_tokens(self) -> dict[str, int] | None:
        """Tokens drawn so far from each corpus of a mix (None: one corpus, no mix)."""
        return None

    def close(self) -> None:
        """Stop background reading (iteration restarts from the saved position)."""
        if self.active is not None:
            self.active.close()
            self.active = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "active", None) is not None:
            self.close()


def check_vocab(manifest: Manifest, url: str, n_token: int) -> None:
    """Raise VocabMismatchError unless the data's vocabulary has ``n_token`` ids."""
    if manifest.vocab_size != n_token:
        raise VocabMismatchError(
            f"{url}: data has a vocabulary of {manifest.vocab_size} tokens, the model has "
            f'{n_token}; set the model\'s n_token to {manifest.vocab_size} (or "auto") or '
            "prepare the data with the model's vocabulary (txl-prepare --vocab FILE, or "
            "--tokenizer FILE for subword data)"
        )
