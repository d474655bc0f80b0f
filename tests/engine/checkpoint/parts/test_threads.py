"""The threads part: the run's compute threads saved, set again on resume unless the user chose
them, and left to the load's choice by a checkpoint saved before the part existed."""

from __future__ import annotations

import pytest
import torch

from txl_dist.engine.checkpoint.parts import ThreadsPart


@pytest.fixture
def threads(monkeypatch):
    """torch's thread count as the load chose 1, restored after the test; no OMP_NUM_THREADS."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_saved_count_is_set_again_and_said_once(threads, caplog):
    ThreadsPart().load_state_dict({"per_rank": 2})
    assert torch.get_num_threads() == 2 and ThreadsPart().state_dict() == {"per_rank": 2}
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("resume: 2 compute thread(s) per rank as the checkpoint's run had, ")
    assert "not the 1 this machine's load would give now" in said


def test_the_same_count_is_silent_and_an_old_checkpoint_keeps_the_loads(threads, caplog):
    ThreadsPart().load_state_dict({"per_rank": 1})
    ThreadsPart().load_state_dict(None)
    assert torch.get_num_threads() == 1 and not caplog.records


def test_the_users_omp_num_threads_wins(threads, monkeypatch, caplog):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ThreadsPart().load_state_dict({"per_rank": 2})
    assert torch.get_num_threads() == 1 and not caplog.records


@pytest.mark.parametrize("saved", [0, -3, "2", 1.5, True, None])
def test_a_damaged_count_is_said_and_left_alone(threads, caplog, saved):
    ThreadsPart().load_state_dict({"per_rank": saved})
    assert torch.get_num_threads() == 1
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == f"checkpoint threads.per_rank is {saved!r}, not a count: 1 kept"
