"""bench/gpu_check.py: its CPU mode runs every part a CPU can, and its checks can fail."""

from __future__ import annotations

import gzip
import json
import math
import sys

import pytest
import torch

from bench.gpu_check import compared, main
from bench.step_profile import CATEGORIES
from tests import processes
from tests.conftest import REPO_ROOT


@pytest.mark.slow  # the check starts the training entry point twice
def test_quick_cpu_check_passes_and_writes_its_rows(shared_data, tmp_path):
    args = [sys.executable, str(REPO_ROOT / "bench" / "gpu_check.py"), "--device", "cpu"]
    args += ["--quick", "--out", str(tmp_path), "--data", str(shared_data / "wikitext-103")]
    proc = processes.run(args, timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = {row["name"]: row for row in report["rows"]}
    assert report["device"] == "cpu" and not any(row["ok"] is False for row in rows.values())
    assert rows["tiny fp32 on cpu: max |NLL - fp64|"]["value"] < 1e-4
    assert rows["tiny bf16 on cpu: gradient cosine vs fp64"]["ok"] is True
    assert rows["tiny ZeRO-2 bf16: resume repeats the losses"]["value"] == 0.0
    assert rows["tiny ZeRO-2 bf16: checkpoint saved"]["ok"] is True
    assert rows["tiny ZeRO-2 bf16: train.profile_steps trace"]["ok"] is True
    assert rows["tiny ZeRO-3 bf16: first loss - ZeRO-2's (same initial weights)"]["ok"] is True
    with gzip.open(tmp_path / "trace-rank0.json.gz") as trace:
        assert "traceEvents" in json.load(trace)
    speed = rows["tiny micro 2 bf16: tokens/s"]
    assert speed["value"] > 0 and speed["targets"] == "corpus" and 0 < speed["busy"] <= 1
    assert set(speed["breakdown"]) == {*CATEGORIES, "idle"}
    assert rows["tiny micro 2 bf16 uniform targets: tokens/s"]["targets"] == "uniform"
    assert "no --reference" in rows["reference MemTransformerLM"]["detail"]
    assert "ok   correctness tiny fp32 on cpu" in proc.stdout  # the printed table


def test_correctness_rows_fail_on_a_wrong_nll_or_gradient():
    reference = [6.5, 6.4, 6.8]
    good = compared("x", reference, [6.50001, 6.4, 6.8], 0.9999, torch.float32)
    assert [row.ok for row in good] == [True, True]
    off = compared("x", reference, [6.5, 6.4002, 6.8], 0.99, torch.float32)
    assert [row.ok for row in off] == [False, False]
    nan = compared("x", reference, [6.5, math.nan, 6.8], 0.999, torch.bfloat16)
    assert nan[0].ok is False and "non-finite" in nan[0].detail


def test_an_unknown_section_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(
        SystemExit, match="--only takes correctness, engine, speed, levers; got engnie"
    ):
        main(["--device", "cpu", "--only", "engine,engnie", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
