"""A one-process run resumed on a machine whose load would give it other compute threads keeps
the threads its checkpoint trained with (float reductions differ with the thread count)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import command, train
from txl_dist.engine import checkpoint

# One core for the resumed process: the load alone would give it 1 thread.
ONE_CORE = "import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " + (
    "import runpy; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def threads_record(out) -> dict:
    tag = (out / "checkpoints" / checkpoint.LATEST).read_text()
    return json.loads((out / "checkpoints" / tag / "txl.json").read_text())["parts"]["threads"]


@pytest.mark.slow
def test_a_resume_keeps_the_threads_the_checkpoint_trained_with(small_corpus, tmp_path):
    out = tmp_path / "run"
    train(out, small_corpus, nprocs=1, overrides=["train.max_steps=2"],
          env={"OMP_NUM_THREADS": "2"})  # fmt: skip
    assert threads_record(out) == {"per_rank": 2}
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cmd = command(out, small_corpus, 1, ["train.max_steps=3"], "auto")
    proc = processes.run(
        [sys.executable, "-c", ONE_CORE, *cmd[1:]], timeout=900, cwd=REPO_ROOT, env=environ
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = (proc.stdout + proc.stderr).count(
        "resume: 2 compute thread(s) per rank as the checkpoint's run had, not the 1 "
    )
    assert said == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert threads_record(out) == {"per_rank": 2}
