"""TXL_INJECT_SLOW: which rank and section are slowed, and bad values named."""

from __future__ import annotations

import pytest

from txl_dist.engine.health.slow_injection import ENV, SlowInjection, from_env


@pytest.mark.parametrize(
    "value,rank,expected",
    [
        ("1:1.5", 1, SlowInjection("forward_backward", 1.5)),
        ("1:2:optimizer", 1, SlowInjection("optimizer", 2.0)),
        ("1:2:data", 0, None),  # another rank's
        ("", 0, None),
    ],
)
def test_parsed_for_its_rank_only(monkeypatch, value, rank, expected):
    monkeypatch.setenv(ENV, value)
    assert from_env(rank) == expected


@pytest.mark.parametrize("value", ["1", "x:2", "1:0.5", "1:2:backward", "1:2:data:3"])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_form(monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ValueError, match=rf"{ENV}='{value}': expected RANK:FACTOR\[:SECTION\]"):
        from_env(0)
