"""Compute threads: the cores this process may use less those other processes keep busy, and a
user's OMP_NUM_THREADS kept as given."""

from __future__ import annotations

import contextlib
import os
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


# choose_threads() twice in one process pinned to the cores sys.argv[1] names: first under the
# user's OMP_NUM_THREADS=2 (torch reads it at import), then with it unset; each case's stdout and
# stderr end with a line of their own.
CHOOSE_TWICE = """
import os, sys
os.sched_setaffinity(0, set(map(int, sys.argv[1].split(","))))
from txl_dist.process.threads import choose_threads
for _ in range(2):
    print(choose_threads(), flush=True)
    for stream in (sys.stdout, sys.stderr):
        print("-- case end --", file=stream, flush=True)
    os.environ.pop("OMP_NUM_THREADS", None)
"""


@contextlib.contextmanager
def spinning(cores: set[int]):
    """A process spinning on each of `cores`, pinned there."""
    spin = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    with contextlib.ExitStack() as stack:
        for core in cores:
            stack.enter_context(processes.process_group([sys.executable, "-c", spin, str(core)]))
        yield


@pytest.fixture(scope="module")
def chosen() -> dict[str, tuple[str, str]]:
    """{case: (stdout, stderr)} of choose_threads() on two cores that two processes keep busy,
    with and without the user's OMP_NUM_THREADS=2: one process start for both."""
    if usable_cores() < 2:
        pytest.skip("needs two cores")
    cores = set(sorted(os.sched_getaffinity(0))[:2])
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    with spinning(cores):
        proc = processes.run(
            [sys.executable, "-c", CHOOSE_TWICE, ",".join(map(str, cores))],
            timeout=120, check=True, env={**environ, "OMP_NUM_THREADS": "2"},
        )  # fmt: skip
    ends = "-- case end --\n"
    outs, errs = proc.stdout.split(ends), proc.stderr.split(ends)
    assert outs[2:] == errs[2:] == [""], proc.stderr
    return {"omp": (outs[0], errs[0]), "chosen": (outs[1], errs[1])}


def test_cores_other_processes_keep_busy_are_left_to_them_and_said_once(chosen):
    stdout, stderr = chosen["chosen"]
    assert stdout == "1\n"
    assert stderr.count("\n") == 1, stderr
    assert "other processes keep" in stderr and "of this machine's 2 cores busy: 1 " in stderr
    assert "instead of 2 (set OMP_NUM_THREADS to choose)" in stderr


def test_a_users_omp_num_threads_is_kept_and_its_oversubscription_said(chosen):
    stdout, stderr = chosen["omp"]
    assert stdout == "2\n"
    assert stderr.startswith("OMP_NUM_THREADS=2 with 1 rank(s): more threads than the ")
    assert stderr.count("\n") == 1, stderr
