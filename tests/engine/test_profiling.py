"""train.profile_steps: a Chrome trace of exactly the chosen steps, named for the rank; an
out-of-memory error: one line with the estimate it broke."""

from __future__ import annotations

import json

import pytest
import torch

from txl_dist.engine.profiling import OutOfDeviceMemoryError, SnapshotOnOutOfMemory, StepProfiler


def traced_steps(profiler: StepProfiler, steps: range) -> None:
    """Each step a named matmul, between the calls the training loop makes."""
    for step in steps:
        profiler.starting(step)
        with torch.profiler.record_function(f"work-of-step-{step}"):
            torch.randn(64, 64) @ torch.randn(64, 64)
        profiler.done(step)
    profiler.close()


def test_the_trace_holds_the_chosen_steps_and_no_others(tmp_path):
    traced_steps(
        StepProfiler([2, 3], str(tmp_path), rank=1, device=torch.device("cpu")), range(1, 6)
    )
    trace = json.loads((tmp_path / "profile" / "rank1-steps2-3.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"work-of-step-2", "work-of-step-3"} <= names
    assert not names & {"work-of-step-1", "work-of-step-4", "work-of-step-5"}
    assert "aten::mm" in names


def test_a_run_ending_inside_the_range_still_writes_its_trace(tmp_path):
    traced_steps(
        StepProfiler([4, 9], str(tmp_path), rank=0, device=torch.device("cpu")), range(3, 6)
    )
    trace = json.loads((tmp_path / "profile" / "rank0-steps4-9.json").read_text())
    assert "work-of-step-5" in {event.get("name") for event in trace["traceEvents"]}


def test_no_profile_steps_no_trace(tmp_path):
    traced_steps(StepProfiler(None, str(tmp_path), rank=0, device=torch.device("cpu")), range(1, 4))
    assert not (tmp_path / "profile").exists()


def test_out_of_memory_becomes_one_line_naming_the_estimate(tmp_path):
    guard = SnapshotOnOutOfMemory(str(tmp_path), rank=3, estimate=lambda: 5 * 2**30)
    line = r"^rank 3 ran out of device memory .*txl-inspect estimates 5\.00 GiB a rank"
    with pytest.raises(OutOfDeviceMemoryError, match=line), guard:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(ValueError, match="^other$"), guard:  # other errors pass untouched
        raise ValueError("other")
