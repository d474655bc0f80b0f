"""Compute threads: the cores this process may use less those other processes keep busy, and a
user's OMP_NUM_THREADS kept as given."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from tests import processes
from txl_dist.process.threads import threads_for, usable_cores


def test_threads_are_the_free_cores_shared_among_the_ranks():
    assert threads_for(cores=2, busy=0.1, ranks=1) == 2  # idle: torch's default
    assert threads_for(cores=2, busy=1.0, ranks=1) == 1  # another process on one core
    assert threads_for(cores=2, busy=0.8, ranks=1) == 1  # a thread must keep pace at barriers
    assert threads_for(cores=2, busy=2.0, ranks=1) == 1  # never none
    assert threads_for(cores=16, busy=0.0, ranks=2) == 8
    assert threads_for(cores=16, busy=1.0, ranks=2) == 7  # not 8: 16 threads on 15 free cores
    assert threads_for(cores=16, busy=3.0, ranks=4) == 3
    assert threads_for(cores=2, busy=0.0, ranks=4) == 1


CHOOSE = "from txl_dist.process.threads import choose_threads; print(choose_threads())"


@contextlib.contextmanager
def spinning(cores: set[int]):
    """A process spinning on each of `cores`, pinned there."""
    spin = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    with contextlib.ExitStack() as stack:
        for core in cores:
            stack.enter_context(processes.process_group([sys.executable, "-c", spin, str(core)]))
        yield


def choose(cores: set[int], **env: str) -> subprocess.CompletedProcess:
    """choose_threads() in a process whose affinity is `cores`: its stdout is the threads."""
    pinned = f"import os; os.sched_setaffinity(0, {cores!r}); {CHOOSE}"
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return processes.run([sys.executable, "-c", pinned], timeout=120, check=True,
                         env={**environ, **env})  # fmt: skip


@pytest.mark.skipif(usable_cores() < 2, reason="needs two cores")
def test_cores_other_processes_keep_busy_are_left_to_them_and_said_once():
    cores = set(sorted(os.sched_getaffinity(0))[:2])
    with spinning(cores):
        proc = choose(cores)
    assert proc.stdout == "1\n"
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "other processes keep" in proc.stderr and "of this machine's 2 cores busy: 1 " in (
        proc.stderr
    )
    assert "instead of 2 (set OMP_NUM_THREADS to choose)" in proc.stderr


@pytest.mark.skipif(usable_cores() < 2, reason="needs two cores")
def test_a_users_omp_num_threads_is_kept_and_its_oversubscription_said():
    cores = set(sorted(os.sched_getaffinity(0))[:2])
    with spinning(cores):
        proc = choose(cores, OMP_NUM_THREADS="2")
    assert proc.stdout == "2\n"
    assert proc.stderr.startswith("OMP_NUM_THREADS=2 with 1 rank(s): more threads than the ")
    assert proc.stderr.count("\n") == 1, proc.stderr
