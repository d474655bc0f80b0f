"""A rank stopped (SIGSTOP) in a real 2-rank training run: the other rank ends the run within
train.hang_timeout_s, naming the phase, the step and the stopped rank, long before a collective
would give up (train.dist_timeout_s). A save that hangs ends the run within
train.checkpoint_timeout_s, named as the save."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.pretrain_pausing import PAUSE_IN_SAVE_ENV
from tests.integration.runs import PRETRAIN, PRETRAIN_PAUSING, command, training_after
from txl_dist.engine import checkpoint
from txl_dist.process.watchdog import HANG_EXIT_CODE

HANG_TIMEOUT_S = 8


def rank_process(launcher: int, rank: int) -> psutil.Process:
    """The process of `rank` under either launcher (`python -u launch/pretrain.py ...`)."""
    for process in psutil.Process(launcher).children(recursive=True):
        if PRETRAIN in process.cmdline()[:3] and process.environ().get("RANK") == str(rank):
            return process
    raise AssertionError(f"no rank {rank} under launcher {launcher}")


# torchrun's agent holds the store, so the healthy rank reads who went silent. (Under DeepSpeed's
# launcher rank 0 holds it; stopping rank 0 there, measured at 10.3 s, reads "rank 0 (store host)
# not answering", as tests/process/test_watchdog.py checks without a training run.)
@pytest.mark.parametrize(
    "launcher,stopped,named", [("torchrun", 1, "not answering: rank 1 (last heard ")]
)
def test_a_stopped_rank_ends_the_run_within_the_hang_timeout(
    wikitext, tmp_path, launcher, stopped, named
):
    out = tmp_path / "hung"
    overrides = [
        "train.max_steps=100000",
        f"train.hang_timeout_s={HANG_TIMEOUT_S}",
        "train.dist_timeout_s=120",  # a collective alone would give up only then
    ]
    cmd = command(out, wikitext, 2, overrides, None, launcher=launcher)
    with training_after(cmd, out, steps=3) as run:
        frozen = rank_process(run.pid, stopped)
        healthy = rank_process(run.pid, 1 - stopped)
        frozen.suspend()  # SIGSTOP
        sent = time.monotonic()
        output = []
        while not any(" hung: " in line for line in output):
            output.append(run.stdout.readline())
            assert output[-1], "".join(output)[-3000:]  # the launcher ended without the line
        detected = time.monotonic() - sent
        healthy.wait(timeout=10)
        os.kill(frozen.pid, signal.SIGKILL)  # what the launcher does after its grace period
        rest, _ = run.communicate(timeout=60)
    print(f"{launcher}: rank {stopped} stopped, detected in {detected:.1f} s")
    line = output[-1]
    assert f"[txl-dist] rank {1 - stopped} hung: no progress in step " in line
    assert f"(train.hang_timeout_s={HANG_TIMEOUT_S}); {named}" in line
    assert detected < HANG_TIMEOUT_S + 6  # 3 heartbeats (2.4 s) and a read past the timeout
    assert run.returncode != 0 and str(HANG_EXIT_CODE) in rest, rest[-3000:]
    stacks = (out / "errors" / f"rank{1 - stopped}.txt").read_text()
    assert "in train_step" in stacks or "in agreed" in stacks or "in _log_train" in stacks


def test_a_hung_save_ends_the_run_within_the_checkpoint_timeout(wikitext, tmp_path):
    out = tmp_path / "saving"
    timeout_s = 20  # also the start-up's and the first step's: room for a loaded machine
    # A synchronous save: the step's own call hangs (a background write that hangs is waited
    # for, and caught the same way, by the next save's call or the end of the run).
    overrides = [
        "train.save_interval=2",
        f"train.checkpoint_timeout_s={timeout_s}",
        "train.async_save=false",
    ]
    env = {**os.environ, PAUSE_IN_SAVE_ENV: "2"}  # the save of step 2 never ends
    started = time.monotonic()
    cmd = command(out, wikitext, 1, overrides, None, script=PRETRAIN_PAUSING)
    proc = processes.run(cmd, 120, cwd=REPO_ROOT, env=env)
    print(f"a hung save ended the run {time.monotonic() - started:.1f} s after the start")
    assert proc.returncode == HANG_EXIT_CODE, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if " hung: " in line]
    assert line.startswith(
        "[txl-dist] rank 0 hung: no progress in checkpoint save at step 2 for "
    ), line
    assert f" s (train.checkpoint_timeout_s={timeout_s}); no other ranks; ending the run" in line
    stacks = (out / "errors" / "rank0.txt").read_text()
    assert "in save" in stacks and "in _save" in stacks  # where the main thread was stuck
    assert not (out / "checkpoints" / checkpoint.LATEST).exists()  # nothing half-saved published
