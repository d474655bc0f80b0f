"""check_mix_state: a mix's stream state from a checkpoint is checked, value by value, before a
stream stands at it; every refusal is one line naming the key and what to do."""

from __future__ import annotations

import copy

import pytest

from data_pipeline.streams.mix_state import StreamStateError, check_mix_state

NAMES, SHARES, ROWS, TGT_LEN = ["long", "short"], [1000, 300], 2, 10


def state(version: int = 2) -> dict:
    """A state two rows could stand at after 50 steps of 10 tokens."""
    rows = (
        [[0, 0, 1, 400, 100, 5000, 3000, 100, 50], [1, 0, 0, 0, 299, 60, 900, 0, 299]]
        if version == 2
        else [[7, 0, 1, 400, 100], [3, 0, 0, 0, 299]]
    )
    return dict(
        version=version, kind="mix", step=50, seed=3, order="shuffle", global_rows=ROWS,
        tgt_len=TGT_LEN, corpora=list(NAMES), rows=rows,
    )  # fmt: skip


def check(saved) -> None:
    check_mix_state(saved, NAMES, SHARES, ROWS, TGT_LEN)


def test_states_a_stream_can_stand_at_pass_in_both_versions():
    check(state(2))
    check(state(1))


def changed(key, value):
    """``state()`` with one value replaced (``key`` a top-level key or (row, index))."""
    saved = copy.deepcopy(state())
    if isinstance(key, tuple):
        saved["rows"][key[0]][key[1]] = value
    else:
        saved[key] = value
    return saved


VARIANTS = [
    (changed("step", -5), r"step is -5, not a whole number in \[0, "),
    (changed("step", 2.5), r"step is 2\.5, not a whole number"),
    (changed("seed", "7"), r"seed is '7', not a whole number"),
    (changed("seed", -1), r"seed is -1, not a whole number"),
    (changed("order", "backwards"), r"order 'backwards' is not one of \('corpus', 'shuffle'\)"),
    (changed("version", 3), r"version 3 is not one of \(1, 2\)"),
    (changed("version", True), r"version True is not one of"),
    (changed((0, 0), -1), r"rows\[0\]\[0\] is -1, not a whole number in \[0, 1\]"),
    (changed((0, 0), 2), r"rows\[0\]\[0\] is 2, not a whole number in \[0, 1\]"),
    (changed((1, 5), -(10**15)), r"rows\[1\]\[5\] is -1000000000000000, not a whole number"),
    (changed((0, 1), 10**12), r"rows\[0\]\[1\] is 1000000000000, not a whole number in \[0, 1\]"),
    (changed((0, 3), 10**15), r"rows\[0\]\[3\] is 1000000000000000, not a whole number in \[0, 9"),
    (changed((0, 3), float("nan")), r"rows\[0\]\[3\] is nan, not a whole number"),
    (changed((0, 4), "100"), r"rows\[0\]\[4\] is '100', not a whole number"),
    (changed((0, 4), False), r"rows\[0\]\[4\] is False, not a whole number"),
    (changed((0, 7), 500), r"rows\[0\]\[7\] is 500, not a whole number in \[0, 400\]"),
    (changed("rows", state()["rows"][:1]), r"has 1 rows, its global_rows says 2"),
    (changed("rows", [r[:-2] for r in state()["rows"]]), r"rows\[0\] has 7 values, a version 2"),
    (changed("rows", "0,0,1"), r"rows is not a list of lists of numbers"),
    (changed("rows", [["x" * 10**6]]), r"has 1 values|has 1 rows"),
    (changed("corpora", ["long"]), r"has corpora=\['long'\], this stream \['long', 'short'\]"),
    ({k: v for k, v in state().items() if k != "rows"}, r"has no rows"),
    ([1, 2], r"is of one corpus"),
]


@pytest.mark.parametrize("saved,message", VARIANTS)
def test_a_state_no_stream_can_stand_at_is_refused_in_one_line_naming_the_key(saved, message):
    with pytest.raises(StreamStateError, match=message) as refused:
        check(saved)
    line = str(refused.value)
    assert "\n" not in line and len(line) < 400, line
    if "corpora=" not in line and "of one corpus" not in line:
        assert line.endswith("resume from another checkpoint (--resume PATH) or start the run anew")
