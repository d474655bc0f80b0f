"""Child processes of the tests that never outlive them.

Launchers start ranks, and ranks start helpers (wandb, DeepSpeed's compile); killing the child a
test started leaves those running. Every launcher a test starts here gets a process group of its
own, and the whole group, with every descendant that left it, is killed when the test is done
with it: on success, on a timeout, on a failure and on Ctrl-C (KeyboardInterrupt) alike.
A test waits for what its children do with `wait_for`, which gives up once the child has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import psutil
import pytest

T = TypeVar("T")


@contextlib.contextmanager
def process_group(args: list[str], **popen_kwargs) -> Iterator[subprocess.Popen]:
    """Popen(args) as the leader of a new process group, killed whole when the block exits.

    Python processes in it print every thread's stack if they crash (a C++ abort in a library
    otherwise leaves only "terminate called ..." in the test's output).
    """
    env = {**(popen_kwargs.pop("env", None) or os.environ), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(args, start_new_session=True, env=env, **popen_kwargs)
    try:
        yield proc
    finally:
        kill_group(proc.pid)
        proc.wait()


def run(
    args: list, timeout: float, check: bool = False, **popen_kwargs
) -> subprocess.CompletedProcess:
    """subprocess.run(args, capture_output=True, text=True, timeout=timeout) in its own group;
    with `check`, a non-zero exit fails the test with the end of the child's stderr."""
    args = [str(arg) for arg in args]
    with process_group(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs
    ) as proc:
        stdout, stderr = proc.communicate(timeout=timeout)
    assert not check or proc.returncode == 0, (
        f"{args[:3]} exited {proc.returncode}: {stderr[-3000:]}"
    )
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def run_at_once(
    commands: list[list], timeout: float, envs: list[dict] | None = None, **popen_kwargs
) -> list[subprocess.CompletedProcess]:
    """`run` for every command at once, each in its own group (command i in environment envs[i]
    where given): on two cores, children that each import torch take half the time."""
    envs = envs or [popen_kwargs.pop("env", None)] * len(commands)
    with contextlib.ExitStack() as stack:
        procs = [
            stack.enter_context(
                process_group(
                    [str(arg) for arg in args],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                    **popen_kwargs,
                )  # fmt: skip
            )
            for args, env in zip(commands, envs)
        ]
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
    return [
        subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        for proc, (stdout, stderr) in zip(procs, outputs)
    ]


def python_ranks(script: str, world_size: int, timeout: float, **popen_kwargs) -> list[str]:
    """`python -c script RANK` for every rank at once, each in its own group; their stdouts.

    Fails with rank 0's stderr unless every rank exits 0.
    """
    ranks = [[sys.executable, "-c", script, rank] for rank in range(world_size)]
    ended = run_at_once(ranks, timeout, **popen_kwargs)
    assert [rank.returncode for rank in ended] == [0] * world_size, ended[0].stderr[-3000:]
    return [rank.stdout for rank in ended]


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float,
    interval: float = 0.2,
    running: subprocess.Popen | None = None,
    output: Callable[[], str] = str,
) -> T:
    """Poll until check() is truthy and return its value; fail after timeout seconds, or as soon
    as `running` (the process that should bring it about) has exited, with output() appended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if running is not None and running.poll() is not None:
            pytest.fail(f"exit {running.returncode} while waiting for {what}\n{output()}")
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{output()}")


def kill_group(pgid: int) -> None:
    """SIGKILL the group led by `pgid` and every descendant of its leader, also those in
    sessions of their own (torchrun starts each rank in a new session, out of the group's
    reach). The family is frozen first, so no launcher starts another rank meanwhile."""
    for proc in family(pgid):
        with contextlib.suppress(psutil.Error):
            proc.suspend()
    for proc in family(pgid):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def family(pid: int) -> list[psutil.Process]:
    """The process `pid` and its descendants; none once it has exited."""
    try:
        leader = psutil.Process(pid)
        return [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return []
