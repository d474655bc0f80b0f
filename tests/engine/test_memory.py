import torch

from txl_dist.engine.memory import MemoryBank


def test_slots_round_trip_through_rows():
    bank = MemoryBank(slots=2)
    assert bank.rows_state() is None
    layers = [torch.arange(4 * 3 * 2, dtype=torch.float).view(4, 3, 2) + 100 * i for i in range(3)]
    bank.load_rows(layers, torch.device("cpu"))
    # slot 1 holds rows 2..3 of every layer
    assert torch.equal(bank.get(1)[2], layers[2][2:4])
    restored = bank.rows_state()
    assert all(torch.equal(a, b) for a, b in zip(restored, layers))
    bank.reset()
    assert bank.get(0) is None and bank.rows_state() is None
