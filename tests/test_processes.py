"""An interrupted test run leaves no process behind (tests/processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO_ROOT
from tests.processes import kill_group, wait_for

# A test that starts a "launcher" whose "rank" is a grandchild, as deepspeed and torchrun do;
# torchrun starts its ranks in sessions of their own (NEW_SESSION).
LAUNCHING_TEST = """
import sys
from tests.processes import run

RANK = "import time; time.sleep(300)"
LAUNCHER = (
    "import subprocess, sys, time; "
    f"rank = subprocess.Popen([sys.executable, '-c', {RANK!r}], start_new_session=NEW_SESSION); "
    "open(sys.argv[1], 'w').write(str(rank.pid)); time.sleep(300)"
)

def test_launches():
    run([sys.executable, "-c", LAUNCHER, PID_FILE], timeout=600)
"""


@pytest.mark.parametrize("new_session", [False, True], ids=["deepspeed", "torchrun"])
def test_ctrl_c_during_a_test_ends_the_launcher_and_its_ranks(tmp_path, new_session):
    pid_file = tmp_path / "rank.pid"
    test = LAUNCHING_TEST.replace("PID_FILE", repr(str(pid_file)))
    test = test.replace("NEW_SESSION", repr(new_session))
    (tmp_path / "test_launching.py").write_text(test)
    pytest_run = subprocess.Popen(
        # A basetemp of its own: a new numbered one would remove old ones at exit, for minutes.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
        + ["--basetemp", str(tmp_path / "inner")],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # As in a terminal: a suite started in the background (`... &` in a script) inherits
        # SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and pytest_run.poll() is None, "no rank started"
            time.sleep(0.1)
        rank = psutil.Process(int(pid_file.read_text()))
        os.kill(pytest_run.pid, signal.SIGINT)  # Ctrl-C reaches pytest (its group is apart)
        output, _ = pytest_run.communicate(timeout=120)
        assert b"KeyboardInterrupt" in output
        gone, alive = psutil.wait_procs([rank], timeout=10)
        assert rank in gone and not alive
    finally:
        kill_group(pytest_run.pid)


def test_wait_for_returns_the_value_and_fails_at_the_timeout_or_once_the_child_ended():
    values = iter([0, None, "ready"])
    assert wait_for("the third value", lambda: next(values), timeout=5, interval=0) == "ready"
    with pytest.raises(pytest.fail.Exception, match="timed out after 0 s waiting for never"):
        wait_for("never", lambda: False, timeout=0.05, interval=0.01)
    ended = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    ended.wait()
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="exit 3 while waiting for a file\nits log"):
        wait_for("a file", lambda: False, 60, running=ended, output=lambda: "its log")
    assert time.monotonic() - start < 30  # not the timeout
