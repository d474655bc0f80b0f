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


# choose_threads() twice in one process pinned to the cores sys.argv[1] names: first under the
# user's OMP_NUM_THREADS=2 (torch reads it at import), then with it unset; each case's stdout and
# stderr end with a line of their own. The imports come first, before the cores are kept busy
# (on two busy cores they took seconds): the child says so and waits for a line on stdin.
CHOOSE_TWICE = """
import os, sys
os.sched_setaffinity(0, set(map(int, sys.argv[1].split(","))))
from txl_dist.process.threads import choose_threads
print("imported", flush=True)
sys.stdin.readline()
for _ in range(2):
    print(choose_threads(), flush=True)
    for stream in (sys.stdout, sys.stderr):
        print("-- case end --", file=stream, flush=True)
    os.environ.pop("OMP_NUM_THREADS", None)
"""


@contextlib.contextmanager
def spinning(cores: set[int]):
    """A process spinning on each of `cores`, pinned there: each has begun when this enters."""
    spin = (
        "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); print(flush=True)\n"
        "while True: pass"
    )
    with contextlib.ExitStack() as stack:
        spinners = [
            stack.enter_context(
                processes.process_group(
                    [sys.executable, "-c", spin, str(core)], stdout=subprocess.PIPE, text=True
                )
            )
            for core in cores
        ]
        for spinner in spinners:
            assert spinner.stdout.readline() == "\n"
        yield


@pytest.fixture(scope="module")
def chosen() -> dict[str, tuple[str, str]]:
    """{case: (stdout, stderr)} of choose_threads() on two cores that two processes keep busy,
    with and without the user's OMP_NUM_THREADS=2: one process start for both."""
    if usable_cores() < 2:
        pytest.skip("needs two cores")
    cores = set(sorted(os.sched_getaffinity(0))[:2])
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    args = [sys.executable, "-c", CHOOSE_TWICE, ",".join(map(str, cores))]
    pipes = {name: subprocess.PIPE for name in ("stdin", "stdout", "stderr")}
    env = {**environ, "OMP_NUM_THREADS": "2"}
    with processes.process_group(args, text=True, env=env, **pipes) as proc:
        assert proc.stdout.readline() == "imported\n"
        with spinning(cores):
            stdout, stderr = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    ends = "-- case end --\n"
    outs, errs = stdout.split(ends), stderr.split(ends)
    assert outs[2:] == errs[2:] == [""], stderr
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
