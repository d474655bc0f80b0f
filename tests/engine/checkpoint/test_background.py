"""An asynchronous save's host memory: the bytes torch.save writes, in an arena the run reuses."""

import io

import torch

from txl_dist.engine.checkpoint import background
from txl_dist.engine.checkpoint.background import HostArena, serialized

BLOCK = 1000  # bytes: every tensor below spans blocks


def saved_bytes(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def test_snapshots_hold_torch_saves_bytes_in_memory_the_arena_reserved_and_reuses(monkeypatch):
    monkeypatch.setattr(background, "ARENA_BLOCK_BYTES", BLOCK)
    states = [
        {
            "weight": torch.randn(300, 7) * k,
            "rows": [torch.arange(k + 5), k],
            "empty": torch.zeros(0),
        }
        for k in range(3)
    ]
    size = len(saved_bytes(states[0]))
    arena = HostArena()
    arena.reserve(size)
    for state in states:  # one save after another, as a run's
        arena.reuse()
        host = serialized(state, arena)
        assert b"".join(chunk.tobytes() for chunk in host.chunks) == saved_bytes(state)
        assert arena.held == -(-size // BLOCK) * BLOCK  # reserved up front, never grown
