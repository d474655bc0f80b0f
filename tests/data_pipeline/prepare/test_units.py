"""Units and pieces: which pieces a bounded sample takes."""

from __future__ import annotations

from data_pipeline.prepare.units import evenly_spaced


def pieces(sizes: list[int]) -> list[tuple[str, int, int, int]]:
    """Pieces of the given byte sizes, back to back in one file."""
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return [("f", a, a + n, sum(sizes)) for a, n in zip(starts, sizes)]


def test_a_sample_takes_evenly_spaced_pieces_within_its_budget():
    all_pieces = pieces([100] * 10)
    assert evenly_spaced(all_pieces, 1000) == all_pieces  # it fits: all of it
    assert [p[1] for p in evenly_spaced(all_pieces, 250)] == [200, 700]  # one from each half
    assert [p[1] for p in evenly_spaced(all_pieces, 499)] == [100, 300, 600, 800]
    assert [p[1] for p in evenly_spaced(all_pieces, 1)] == [500]  # never empty
