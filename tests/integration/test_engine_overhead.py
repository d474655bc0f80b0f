"""bench/engine_overhead.py runs end to end: a 2-step smoke run, no timing asserted."""

from __future__ import annotations

import re
import sys

from tests import processes
from tests.conftest import REPO_ROOT


def test_engine_overhead_bench_reports_parts_and_ratio(small_corpus):
    cmd = [sys.executable, str(REPO_ROOT / "bench" / "engine_overhead.py")]
    cmd += ["--data", str(small_corpus), "--steps", "2", "--nproc", "1", "--configs", "tiny"]
    proc = processes.run([*cmd, "--clock", "cpu"], timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parts = dict(
        (name.strip(), float(ms))
        for ms, name in re.findall(r"^\s+([\d.]+)  (.+)$", proc.stdout, re.MULTILINE)
    )
    # The model's own work is timed inside the engine, and the bare step beside it.
    for part in ("model forward (in engine)", "DeepSpeed backward (autograd + hooks)"):
        assert parts[part] > 0, proc.stdout
    assert parts["bare forward"] > 0 and parts["bare backward"] > 0, proc.stdout
    (ratio,) = re.findall(r"engine/bare throughput ([\d.]+)", proc.stdout)
    assert 0 < float(ratio) < 10, proc.stdout
