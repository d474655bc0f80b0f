"""An epoch's order: its samples in corpus order or shuffled (cut documents kept whole),
and the documents inside each sample."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from data_pipeline.streams.table import SampleTable


@dataclass(frozen=True)
class EpochOrder:
    """The order of samples (and of documents in them) in one epoch."""

    epoch: int
    """Epoch number."""
    samples: np.ndarray
    """Sample ids in epoch order."""
    starts: np.ndarray
    """Virtual start of each epoch-order sample, plus N at the end."""
    shuffle_seed: int | None
    """Seed of the document shuffle, None for corpus order."""

    @classmethod
    def of(cls, table: SampleTable, order: str, seed: int, epoch: int) -> EpochOrder:
        """Corpus order, or a permutation seeded by (seed, epoch)."""
        if order == "corpus":
            samples = np.arange(len(table))
        else:
            samples = shuffled_chains(table.continues, np.random.default_rng([seed, epoch]))
        starts = np.concatenate([[0], np.cumsum(table.tokens[samples])])
        return cls(epoch, samples, starts, seed if order == "shuffle" else None)

    def pieces(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(sample id, begin, end) pieces covering virtual tokens [start, stop)."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        for j in range(first, last):
            base = int(self.starts[j])
            yield (
                int(self.samples[j]),
                max(start, base) - base,
                min(stop, self.starts[j + 1]) - base,
            )


def shuffled_chains(continues: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample ids in a random order of chains (runs of samples joined by a cut document), each
    chain's samples in corpus order; without cut documents, ``rng.permutation`` of the samples."""
    heads = np.flatnonzero(~continues)
    sizes = np.diff(np.append(heads, len(continues)))
    perm = rng.permutation(len(heads))
    first, size = heads[perm], sizes[perm]
    return np.repeat(first - np.cumsum(size) + size, size) + np.arange(len(continues))


def document_permutation(
    order: EpochOrder, sample: int, documents: int, cut_ends: tuple[bool, bool]
) -> np.ndarray | None:
    """The order of a sample's ``documents`` entries in this epoch (None: as stored, for corpus
    order); pieces of cut documents (``cut_ends``: first, last) stay where they join their
    neighbours. Its lengths alone give a sample's document ends in the epoch."""
    lo, hi = int(cut_ends[0]), documents - int(cut_ends[1])
    if order.shuffle_seed is None or hi - lo < 2:
        return None
    rng = np.random.default_rng([order.shuffle_seed, order.epoch, sample])
    perm = np.arange(documents)
    perm[lo:hi] = lo + rng.permutation(hi - lo)
    return perm


def shuffle_documents(
    tokens: np.ndarray,
    lengths: np.ndarray,
    order: EpochOrder,
    sample: int,
    cut_ends: tuple[bool, bool],
) -> tuple[np.ndarray, np.ndarray]:
    """A sample's tokens and document lengths with its documents in this epoch's order
    (``document_permutation``)."""
    perm = document_permutation(order, sample, len(lengths), cut_ends)
    if perm is None:
        return tokens, lengths
    starts = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)])
    new_lengths = lengths[perm].astype(np.int64)
    new_starts = np.concatenate([[0], np.cumsum(new_lengths[:-1])])
    # Position p of the result, in new document k, is starts[perm[k]] + (p - new_starts[k]).
    gather = np.repeat(starts[perm] - new_starts, new_lengths) + np.arange(len(tokens))
    return tokens[gather], new_lengths
