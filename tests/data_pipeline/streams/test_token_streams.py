"""TokenStreams: continuity, coverage, equal steps, tail, resume, shuffle, processes, threads."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from data_pipeline import (
    IGNORE_INDEX,
    Reading,
    TokenStreams,
    Vocab,
    manifest_url,
)
from tests.data_pipeline.conftest import decoded_split
from tests.processes import python_ranks


def split_ids(root: Path, split: str) -> np.ndarray:
    """The split's token ids in corpus order, read independently with webdataset."""
    vocab = Vocab.load(str(root / "vocab.txt"))
    tokens, _ = decoded_split(root, split)
    return vocab.encode(tokens).astype(np.int64)


def global_batches(url, world, rows, tgt_len, steps=None, **kw) -> list[torch.Tensor]:
    """Batches of all ranks, ranks simulated in this process, concatenated along rows."""
    per_rank = []
    for rank in range(world):
        stream = TokenStreams(url, rows, tgt_len, rank, world, epochs=1, **kw)
        per_rank.append(list(itertools.islice(stream, steps)))
    assert len({len(b) for b in per_rank}) == 1, "ranks yield different step counts"
    return [
        (torch.cat([b[k][0] for b in per_rank]), torch.cat([b[k][1] for b in per_rank]))
        for k in range(len(per_rank[0]))
    ]


@pytest.mark.parametrize(
    "world,rows,tgt_len,block_tokens",
    [
        (1, 1, 64, 1 << 22),
        (1, 4, 150, 2000),
        (2, 3, 70, 5000),
        (3, 2, 1000, 1 << 22),
        (4, 5, 33, 900),
    ],
)
def test_rows_are_contiguous_and_cover_the_epoch(wt103, world, rows, tgt_len, block_tokens):
    ref = split_ids(wt103, "valid")
    url = manifest_url(str(wt103), "valid")
    batches = global_batches(url, world, rows, tgt_len, reading=Reading(block_tokens=block_tokens))
    global_rows = world * rows
    stride = len(ref) // global_rows
    assert len(batches) == (stride - 1) // tgt_len
    row_streams = [torch.cat([x[g] for x, _ in batches]).numpy() for g in range(global_rows)]
    for g, seq in enumerate(row_streams):
        # Row g is one contiguous slice: consecutive batches continue it token for token.
        assert np.array_equal(seq, ref[g * stride : g * stride + len(seq)])
    for x, y in batches:
        assert x.dtype == y.dtype == torch.int64 and x.shape == (global_rows, tgt_len)
    # Targets are the next tokens; the rows never overlap, and only the short tails are left out.
    last_x, last_y = batches[-1]
    assert torch.equal(batches[0][1][:, :-1], batches[0][0][:, 1:])
    assert torch.equal(
        last_y[:, -1],
        torch.as_tensor(ref[np.arange(global_rows) * stride + len(batches) * tgt_len]),
    )
    read = len(batches) * tgt_len * global_rows
    assert len(ref) - read < global_rows * tgt_len + global_rows


@pytest.mark.parametrize("world,rows,tgt_len", [(1, 4, 50), (2, 3, 70), (1, 7, 5000)])
def test_tail_scores_every_token_once(wt103, world, rows, tgt_len):
    ref = split_ids(wt103, "valid")
    url = manifest_url(str(wt103), "valid")
    scored = np.zeros(len(ref), int)
    per_rank = [list(TokenStreams(url, rows, tgt_len, r, world, tail=True)) for r in range(world)]
    assert len({len(b) for b in per_rank}) == 1
    stride = -(-(len(ref) - 1) // (world * rows))
    for rank, batches in enumerate(per_rank):
        col = 0
        for x, y in batches:
            assert x.shape == y.shape and x.shape[1] <= tgt_len
            for i in range(rows):
                pos = (rank * rows + i) * stride + col + np.flatnonzero(y[i] != IGNORE_INDEX)
                assert np.array_equal(y[i][y[i] != IGNORE_INDEX].numpy(), ref[pos + 1])
                assert np.array_equal(x[i][y[i] != IGNORE_INDEX].numpy(), ref[pos])
                scored[pos + 1] += 1
            col += x.shape[1]
    assert scored[0] == 0 and (scored[1:] == 1).all()


def test_tail_iterates_a_full_pass_each_time(wt103_valid):
    stream = TokenStreams(wt103_valid, 4, 500, tail=True)
    first, second = list(stream), list(stream)
    assert len(first) == len(second) == stream.steps_per_epoch
    assert all(torch.equal(a[1], b[1]) for a, b in zip(first, second))


def test_resume_after_k_batches_gives_the_same_next_batches(wt103_valid):
    stream = TokenStreams(wt103_valid, 3, 40, reading=Reading(block_tokens=500))
    expected = list(itertools.islice(stream, 2 * stream.steps_per_epoch + 5))
    stream = TokenStreams(wt103_valid, 3, 40, reading=Reading(block_tokens=500))
    k = stream.steps_per_epoch + 3  # resume inside the second epoch
    list(itertools.islice(stream, k))
    state = stream.state_dict()
    assert state["epoch"] == 1 and state["step"] == 3
    resumed = TokenStreams(wt103_valid, 3, 40, reading=Reading(block_tokens=500))
    resumed.load_state_dict(state)
    for (x, y), (ex, ey) in zip(itertools.islice(resumed, 20), expected[k:]):
        assert torch.equal(x, ex) and torch.equal(y, ey)


@pytest.mark.parametrize("order", ["corpus", "shuffle"])
@pytest.mark.parametrize("saved_world,resumed_world", [(2, 1), (1, 2)])
def test_state_moves_between_world_sizes(wt103_valid, order, saved_world, resumed_world):
    global_rows, tgt_len, k = 4, 64, 700
    saved = [
        TokenStreams(wt103_valid, global_rows // saved_world, tgt_len, r, saved_world, 5, order)
        for r in range(saved_world)
    ]
    for stream in saved:
        list(itertools.islice(stream, k))
    states = [s.state_dict() for s in saved]
    assert all(s == states[0] for s in states)
    full = TokenStreams(wt103_valid, global_rows, tgt_len, seed=5, order=order)
    expected = list(itertools.islice(full, k + 30))[k:]
    resumed = []
    for r in range(resumed_world):
        stream = TokenStreams(wt103_valid, global_rows // resumed_world, tgt_len, r, resumed_world)
        stream.load_state_dict(states[0])
        resumed.append(list(itertools.islice(stream, 30)))
    for step, (ex, ey) in enumerate(expected):
        assert torch.equal(torch.cat([b[step][0] for b in resumed]), ex)
        assert torch.equal(torch.cat([b[step][1] for b in resumed]), ey)


def test_epoch_boundary_is_flagged(wt103_valid):
    stream = TokenStreams(wt103_valid, 2, 1000)
    seen = []
    for _ in itertools.islice(stream, stream.steps_per_epoch + 1):
        seen.append((stream.epoch, stream.step, stream.new_epoch))
    assert seen[0] == (0, 0, True) and seen[1][2] is False
    assert seen[-1] == (1, 0, True)


def test_shuffle_permutes_documents_per_epoch(lm1b):
    url = manifest_url(str(lm1b), "valid")
    ref = split_ids(lm1b, "valid")
    stream = TokenStreams(url, 1, 100, seed=3, order="shuffle", epochs=2)
    epochs = {0: [], 1: []}
    for x, _ in stream:
        epochs[stream.epoch].append(x[0].numpy())
    first, second = (np.concatenate(epochs[e]) for e in (0, 1))
    assert not np.array_equal(first, ref[: len(first)])
    assert not np.array_equal(first, second)
    # Same multiset of tokens as the corpus, minus the left-out tail; sentences stay whole.
    assert np.bincount(ref, minlength=ref.max() + 1).sum() - len(first) < 101
    assert (np.bincount(first, minlength=ref.max() + 1) <= np.bincount(ref)).all()
    again = TokenStreams(url, 1, 100, seed=3, order="shuffle", epochs=1)
    assert np.array_equal(np.concatenate([x[0].numpy() for x, _ in again]), first)


@pytest.mark.slow
def test_two_processes_cover_the_same_as_one(wt103, tmp_path):
    url = manifest_url(str(wt103), "valid")
    script = (
        "import sys, torch\n"
        "from data_pipeline import TokenStreams\n"
        "rank = int(sys.argv[1])\n"
        f"s = TokenStreams({url!r}, 3, 90, rank, 2, epochs=1)\n"
        f"torch.save([x for x, _ in s], f'{tmp_path}/rank{{rank}}.pt')\n"
    )
    python_ranks(script, 2, timeout=120)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    single = global_batches(url, 1, 6, 90)
    assert len(single) == len(ranks[0])
    for step, (x, _) in enumerate(single):
        assert torch.equal(torch.cat([ranks[0][step], ranks[1][step]]), x)
