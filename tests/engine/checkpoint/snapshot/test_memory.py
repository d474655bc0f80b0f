"""The snapshot's size from tensors' storages, and the machines' agreement on room for it."""

import torch

from txl_dist.engine.checkpoint.snapshot.memory import (
    optimizer_tensors,
    room_among,
    storage_bytes,
    synchronous_line,
)

GIB = 1024**3


def test_views_of_one_storage_count_once_and_whole():
    flat = torch.zeros(1000)  # 4000 bytes
    assert storage_bytes([flat[:10], flat[500:], flat]) == 4000  # torch.save writes it whole
    assert storage_bytes([flat, torch.zeros(10, dtype=torch.bfloat16)]) == 4020


def test_a_torch_optimizer_holds_its_parameters_and_moments():
    weight = torch.nn.Parameter(torch.ones(5))
    adam = torch.optim.Adam([weight])
    weight.grad = torch.ones(5)
    adam.step()
    tensors = optimizer_tensors(adam)
    # The weight, exp_avg, exp_avg_sq and Adam's step counter (a one-element tensor).
    assert storage_bytes(tensors) == 4 * 5 * 3 + 4


def test_a_machine_needs_room_for_all_its_ranks_snapshots():
    # 4 GiB each fits 10 GiB alone, but two ranks on one machine need 2 x 4 x 1.25 + 0.5 GiB.
    assert room_among([("a", 4 * GIB, 10 * GIB)]).fits
    short = room_among([("a", 4 * GIB, 10 * GIB), ("a", 4 * GIB, 10 * GIB)])
    assert not short.fits
    assert synchronous_line(short.shortage, step=3) == (
        "a (rank 0) has 10.00 GiB of host memory available, the snapshots of its 2 rank(s) need "
        "10.50 GiB beside training's peak, with the margin: saving step 3 synchronously "
        "(train.async_save)"
    )


def test_one_short_machine_makes_every_rank_save_synchronously_and_is_named():
    need, plenty, little = GIB, 10 * GIB, 2 * GIB  # b's two ranks need 3 GiB; rank 3 sees 2
    everyone = [("a", need, plenty), ("a", need, plenty), ("b", need, plenty), ("b", need, little)]
    answer = room_among(everyone)
    assert not answer.fits and answer.shortage.startswith("b (rank 3) has ")
    assert room_among(everyone[:3]).fits
