"""StopRequest: all ranks agree on stopping and on whether train.max_wallclock caused it."""

import json
import signal
import sys
import textwrap

import pytest
import torch

from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.process import signals
from txl_dist.process.signals import StopRequest, catch_stop_signals

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def default_handlers():
    """Each test starts with no signal caught and leaves pytest's handlers as they were."""
    saved = {sig: signal.getsignal(sig) for sig in signals.STOP_SIGNALS}
    signals._received = signals._first_interrupt = None
    yield
    signals._received = signals._first_interrupt = None
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_deadline_stop_is_reported_as_wallclock():
    stop = StopRequest(max_wallclock=1e-9)
    assert stop.agreed(CPU) and stop.wallclock
    assert stop.reason() == "train.max_wallclock reached"


def test_signal_wins_over_the_deadline():
    stop = StopRequest(max_wallclock=1e-9)
    signal.raise_signal(signal.SIGUSR1)
    assert stop.agreed(CPU) and not stop.wallclock
    assert stop.reason() == "SIGUSR1 received"


def test_a_signal_before_the_engine_starts_is_kept():
    catch_stop_signals()  # what launch/pretrain.py does first
    signal.raise_signal(signal.SIGTERM)  # the process survives it
    signal.raise_signal(signal.SIGUSR1)
    stop = StopRequest()
    assert stop.agreed(CPU) and stop.reason() == "SIGTERM received"


def test_no_stop_before_the_deadline():
    stop = StopRequest(max_wallclock=3600)
    assert not stop.agreed(CPU) and not stop.wallclock


AGREEING_RANK = """
import json, signal, sys, torch, torch.distributed as dist
from txl_dist.process.signals import StopRequest
rendezvous, case, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
# A file rendezvous: no TCP port to pick, so none another process could take first.
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
# Only rank 1 passes its deadline; in "signal" rank 0 got a signal too.
stop = StopRequest(max_wallclock=1e-9 if rank == 1 else 3600)
if case == "signal" and rank == 0:
    signal.raise_signal(signal.SIGTERM)
# Flags are reduced in the background and read one call later: all ranks agree at call 2.
cpu = torch.device("cpu")
agreed = [stop.agreed(cpu), stop.agreed(cpu)]
stop.settle()
print("RESULT " + json.dumps([agreed, stop.wallclock, stop.reason()]), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow  # two ranks, twice
def test_ranks_agree_on_the_reason(tmp_path):
    for case, wallclock in (("deadline", True), ("signal", False)):
        rendezvous = tmp_path / f"rendezvous-{case}"
        script = f"import sys; sys.argv[1:1] = [{str(rendezvous)!r}, {case!r}]\n{AGREEING_RANK}"
        outputs = processes.python_ranks(script, 2, timeout=300, cwd=REPO_ROOT)
        results = [json.loads(out.split("RESULT ")[1]) for out in outputs]
        assert [result[:2] for result in results] == [[[False, True], wallclock]] * 2
    assert results[0][2] == "SIGTERM received"
    assert results[1][2] == "a stop signal on another rank"


def test_ctrl_c_stops_like_sigterm_and_a_later_second_one_exits_at_once():
    # In a child process: the second Ctrl-C really ends the process.
    script = textwrap.dedent(
        """
        import signal, sys, time
        from txl_dist.process import signals
        from txl_dist.logs import configure_logging
        configure_logging()
        signals.catch_stop_signals()
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # a launcher forwarding the same Ctrl-C
        print(signals._received, flush=True)
        time.sleep(signals.INTERRUPT_REPEAT_S + 0.1)
        signal.raise_signal(signal.SIGINT)
        print("survived", flush=True)
        """
    )
    proc = processes.run([sys.executable, "-c", script], timeout=60)
    assert proc.stdout == "SIGINT\n"
    assert proc.returncode == -signal.SIGINT
    assert proc.stderr == "[txl-dist] second Ctrl-C: exiting without a checkpoint\n"
