"""Where every global row lies in an epoch, and the layouts refused."""

import pytest

from data_pipeline.streams.geometry import Geometry, check_layout


def test_training_rows_are_whole_steps_and_the_short_tail_is_left_out():
    g = Geometry.of(tokens=1000, global_rows=3, tgt_len=50, tail=False)
    # L = 333 tokens a row; a step needs tgt_len inputs and one more target: (333 - 1) // 50.
    assert (g.row_stride, g.steps) == (333, 6)
    assert [g.inputs_in_row(r) for r in range(3)] == [300, 300, 300]
    assert {g.width(s) for s in range(g.steps)} == {50}
    exact = Geometry.of(tokens=300, global_rows=3, tgt_len=50, tail=False)
    assert exact.steps == 1  # 100 tokens a row: the second step would lack its last target


def test_evaluation_rows_score_every_pair_once_the_last_narrower():
    g = Geometry.of(tokens=1000, global_rows=3, tgt_len=50, tail=True)
    # 999 (input, target) pairs in rows of ceil(999 / 3) = 333, in ceil(333 / 50) = 7 steps.
    assert (g.row_stride, g.steps) == (333, 7)
    assert sum(g.inputs_in_row(r) for r in range(3)) == 999
    assert [g.width(s) for s in range(g.steps)] == [50] * 6 + [33]
    short = Geometry.of(tokens=10, global_rows=4, tgt_len=5, tail=True)
    assert [short.inputs_in_row(r) for r in range(4)] == [3, 3, 3, 0]  # the last row is empty


@pytest.mark.parametrize(
    "layout,named",
    [
        (("random", 0, 1, 1, 1), "order must be one of"),
        (("corpus", 2, 2, 1, 1), "rank=2, world_size=2"),
        (("corpus", 0, 1, 0, 1), "rows_per_rank=0"),
        (("corpus", 0, 1, 1, 0), "tgt_len=0"),
    ],
)
def test_a_layout_that_makes_no_sense_is_refused_naming_its_values(layout, named):
    with pytest.raises(ValueError, match=named):
        check_layout(*layout)
    check_layout("shuffle", 1, 2, 3, 4)
