"""MemoryPart: a rank's memories by global row, and its RNG states where its rows are its own."""

from __future__ import annotations

import random

import numpy as np
import torch

from txl_dist.engine.checkpoint.parts.memory import MemoryPart
from txl_dist.engine.checkpoint.parts.run import RunState
from txl_dist.engine.memory import MemoryBank

CPU = torch.device("cpu")


def part(rank: int, rows_per_rank: int, slots: int, step: int = 0) -> MemoryPart:
    return MemoryPart(MemoryBank(slots), rank, rows_per_rank, CPU, 13, RunState("r", step=step))


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()


def test_the_same_rank_and_rows_get_their_memories_and_rng_states_back():
    saved = part(1, 4, slots=2)
    rows = [torch.arange(4 * 3 * 2.0).view(4, 3, 2) + 100 * layer for layer in range(2)]
    saved.memory.load_rows(rows, CPU)
    state = saved.state_dict()
    assert state["first_row"] == 4
    expected = draws()  # what the run would have drawn next
    loaded = part(1, 4, slots=2)
    loaded.load_state_dict([state])
    assert draws() == expected
    assert all(torch.equal(a, b) for a, b in zip(loaded.memory.rows_state(), rows))


def test_another_world_size_takes_its_rows_from_every_saved_rank_and_seeds_its_rng():
    saved = [part(rank, 2, slots=1) for rank in range(2)]  # 2 ranks of 2 rows each
    for rank, p in enumerate(saved):
        p.memory.load_rows([torch.tensor([[[10.0 * rank]], [[10.0 * rank + 1]]])], CPU)
    one = part(0, 4, slots=2, step=9)  # 1 rank of 4 rows: no saved rank had its rows
    one.load_state_dict([p.state_dict() for p in saved])
    assert one.memory.rows_state()[0].flatten().tolist() == [0.0, 1.0, 10.0, 11.0]
    after = torch.rand(3).tolist()
    torch.manual_seed(13 * 1000 + 0 + 9)  # train.seed * 1000 + rank + step
    assert after == torch.rand(3).tolist()
