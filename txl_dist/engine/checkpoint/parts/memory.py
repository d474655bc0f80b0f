"""Each rank's memories, saved with the global rows they belong to, and its RNG states."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from txl_dist.engine.checkpoint.parts.part import Place
from txl_dist.engine.checkpoint.parts.run import RunState
from txl_dist.engine.memory import MemoryBank


@dataclass
class MemoryPart:
    """memory_rank{r}.pt: rank r's memories, their first global row, and its RNG states."""

    memory: MemoryBank
    """This rank's memories."""
    rank: int
    """This rank."""
    rows_per_rank: int
    """Stream rows per rank: this rank's memories start at rank * rows_per_rank."""
    device: torch.device
    """Where the memories live."""
    seed: int
    """train.seed: the RNG's seed on a resume by another world size."""
    run: RunState
    """The run's state (its step seeds that RNG)."""
    name: str = "memory"
    place: Place = Place.RANK_FILE

    def state_dict(self) -> dict[str, Any]:
        return {
            "first_row": self.rank * self.rows_per_rank,
            "memory": self.memory.rows_state(),
            "rng": rng_state(),
        }

    def load_state_dict(self, saved: list[dict[str, Any]]) -> None:
        rows, rng = rows_of(saved, self.rows_per_rank, self.rank)
        self.memory.load_rows(rows, self.device)
        if rng is not None:
            set_rng_state(rng)
        else:
            torch.manual_seed(self.seed * 1000 + self.rank + self.run.step)


def rows_of(saved: list[dict[str, Any]], rows_per_rank: int, rank: int) -> tuple[list | None, Any]:
    """This rank's memory rows from whichever saved ranks held them, and its own RNG state.

    Rows are global, so the saving world size does not matter as long as the global rows match.
    The RNG state is returned only when this rank existed with the same rows before.
    """
    start, stop = rank * rows_per_rank, (rank + 1) * rows_per_rank
    pieces, rng = [], None
    for state in saved:
        memory = state["memory"]
        if memory is None:
            return None, None
        first, count = state["first_row"], memory[0].size(0)
        if first == start and count == rows_per_rank:
            rng = state["rng"]
        lo, hi = max(start, first), min(stop, first + count)
        if lo < hi:
            pieces.append([layer[lo - first : hi - first] for layer in memory])
    rows = [torch.cat([piece[i] for piece in pieces]) for i in range(len(pieces[0]))]
    return rows, rng


def rng_state() -> dict[str, Any]:
    """RNG states in plain types and tensors, so the file loads with weights_only=True."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
