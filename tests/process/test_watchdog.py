"""Hang detection: each phase's deadline, no alarm while phases advance, and a stopped rank named
by the others (real processes and a real gloo group; the training runs are in
tests/integration/test_hang.py)."""

import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.config.sections import TrainConfig
from txl_dist.process.watchdog import HANG_EXIT_CODE, Watchdog


def test_each_phase_kind_has_its_own_deadline():
    watchdog = Watchdog(hang_timeout_s=0.2, checkpoint_timeout_s=5, rank=0, world_size=1)
    with watchdog.phase("step", 1):
        time.sleep(0.3)
        assert watchdog.overdue() == watchdog.current
        assert watchdog.current.setting == "train.hang_timeout_s"
        with watchdog.phase("checkpoint save", 1):
            time.sleep(0.3)
            assert watchdog.overdue() is None  # a save has train.checkpoint_timeout_s
        assert watchdog.overdue() is None  # the save was progress: the step's clock restarted
    for name, slow in (("checkpoint load", False), ("start", False), ("step", True)):
        with watchdog.phase(name, 2, slow=slow):
            time.sleep(0.3)
            assert watchdog.overdue() is None, name
    assert watchdog.current is None


def test_each_evaluation_batch_is_progress():
    watchdog = Watchdog(hang_timeout_s=0.3, checkpoint_timeout_s=5, rank=0, world_size=1)
    with watchdog.phase("evaluation", 4):
        for _ in range(6):  # 0.6 s of batches, each well within the timeout
            time.sleep(0.1)
            watchdog.progress()
            assert watchdog.overdue() is None
        time.sleep(0.4)
        assert watchdog.overdue().where() == "evaluation at step 4"


ONE_PROCESS = """
import sys, time
from txl_dist.process.watchdog import Watchdog
from txl_dist.logs import configure_logging

configure_logging(True)
watchdog = Watchdog(hang_timeout_s=0.5, checkpoint_timeout_s=30, rank=0, world_size=1,
                    errors_dir=sys.argv[1])
watchdog.start()
for step in range(1, 7):  # 0.6 s of steps, each shorter than the timeout
    with watchdog.phase("step", step):
        time.sleep(0.1)
with watchdog.phase("checkpoint save", 6):
    time.sleep(0.8)  # longer than train.hang_timeout_s: a save has its own timeout
print("no false alarm", flush=True)
with watchdog.phase("step", 7):
    time.sleep(30)
print("not reached", flush=True)
"""


@pytest.fixture(scope="module", autouse=True)
def stalled(tmp_path_factory) -> Iterator[tuple[subprocess.Popen, Path, float]]:
    """ONE_PROCESS, started as this module starts: it runs (mostly sleeping) beside the tests
    before the one that reads how it ended. (the process, its errors_dir, when it started)"""
    errors_dir = tmp_path_factory.mktemp("stalled")
    args = [sys.executable, "-c", textwrap.dedent(ONE_PROCESS), str(errors_dir)]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    started = time.monotonic()
    with processes.process_group(args, **pipes) as proc:
        yield proc, errors_dir, started


def test_the_thread_ends_a_stalled_process_and_only_then(stalled):
    proc, errors_dir, started = stalled
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == HANG_EXIT_CODE, stdout + stderr
    assert stdout == "no false alarm\n"
    stacks = errors_dir / "rank0.txt"
    assert stderr.splitlines()[-1] == (
        "[txl-dist] rank 0 hung: no progress in step 7 for 1 s (train.hang_timeout_s=0.5); "
        f"no other ranks; ending the run (stacks: {stacks})"
    )
    stalled_line = ONE_PROCESS.splitlines().index("    time.sleep(30)") + 1
    assert f"line {stalled_line} in <module>" in stacks.read_text()  # the main thread's stack
    assert time.monotonic() - started < 20


@pytest.mark.slow  # two ranks
@pytest.mark.parametrize("stopped", [1, 0], ids=["a rank", "the store host"])
def test_a_stopped_rank_is_named_by_the_other_within_the_timeout(tmp_path, stopped):
    worker = [sys.executable, str(REPO_ROOT / "tests" / "process" / "hang_worker.py")]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    with processes.process_group([*worker, "0", "0", str(tmp_path), "2"], **pipes) as rank0:
        port = rank0.stdout.readline().split()[1]
        with processes.process_group([*worker, "1", port, str(tmp_path), "2"], **pipes) as rank1:
            ranks = [rank0, rank1]
            assert rank1.stdout.readline() == f"port {port}\n"
            assert [rank.stdout.readline() for rank in ranks] == ["running\n"] * 2
            os.kill(ranks[stopped].pid, signal.SIGSTOP)
            sent = time.monotonic()
            healthy = ranks[1 - stopped]
            _, stderr = healthy.communicate(timeout=60)
            detected = time.monotonic() - sent
    assert healthy.returncode == HANG_EXIT_CODE, stderr
    (line,) = [line for line in stderr.splitlines() if " hung: " in line]
    assert f"rank {1 - stopped} hung: no progress in step " in line
    assert "(train.hang_timeout_s=2); " in line
    if stopped == 1:
        heard = r"\(last heard (in step \d+|between phases)\)"
        assert re.search(rf"; not answering: rank 1 {heard}; ", line)
    else:
        assert "; rank 0 (store host) not answering; " in line
    stacks = (tmp_path / "errors" / f"rank{1 - stopped}.txt").read_text()
    assert "in all_reduce" in stacks  # where the main thread waits for the stopped rank
    assert "NCCL flight recorder" not in line  # gloo keeps none: nothing is asked of it
    print(f"detected in {detected:.1f} s")
    assert detected < 2 + 5  # the timeout, 3 beats (0.6 s) and a store read (1 s)


def test_a_null_hang_timeout_turns_detection_off(tmp_path):
    train = TrainConfig(str(tmp_path), global_rows=1, max_steps=1, hang_timeout_s=None)
    watchdog = Watchdog.for_run(train, rank=0, world_size=1)
    with watchdog.phase("step", 1):
        assert watchdog.overdue() is None and watchdog.current.timeout_s == math.inf
    watchdog.stop()
