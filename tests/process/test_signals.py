"""StopRequest: all ranks agree on stopping and on whether train.max_wallclock caused it."""

import json
import signal
import sys
import textwrap
import time

import psutil
import pytest
import torch

from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.process import signals
from txl_dist.process.signals import StopRequest, agreement_cadence, catch_stop_signals

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
    # The deadline counts from this process's start, and a loaded machine's full suite reaches
    # this test more than an hour in: an hour more than this process's age is still ahead.
    age = time.time() - psutil.Process().create_time()
    stop = StopRequest(max_wallclock=age + 3600)
    assert not stop.agreed(CPU) and not stop.wallclock


AGREEING_RANK = """
import json, signal, sys, time, torch, torch.distributed as dist
from txl_dist.process import signals
from txl_dist.process.signals import StopRequest
rendezvous, rank = sys.argv[1], int(sys.argv[2])
# A file rendezvous: no TCP port to pick, so none another process could take first.
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
cpu, all_reduce, results = torch.device("cpu"), dist.all_reduce, {}
for case in ("deadline", "signal"):
    signals._received = None  # each case starts with no signal caught
    # Only rank 1 passes its deadline; in "signal" rank 0 got a signal too.
    stop = StopRequest(max_wallclock=1e-9 if rank == 1 else 3600)
    if case == "signal" and rank == 0:
        signal.raise_signal(signal.SIGTERM)
    # Flags are reduced in the background and read one call later: all ranks agree at call 2.
    agreed = [stop.agreed(cpu), stop.agreed(cpu)]
    stop.settle()
    results[case] = [agreed, stop.wallclock, stop.reason()]
# Steps of 10 ms on rank 0, 20 ms on rank 1; rank 0 gets a signal at step 40.
signals._received = None
stop, reductions, step = StopRequest(agree_every_s=0.5), [], 0
dist.all_reduce = lambda *args, **kwargs: reductions.append(step) or all_reduce(*args, **kwargs)
for step in range(1, 1000):
    time.sleep(0.01 * (rank + 1))
    if rank == 0 and step == 40:
        signal.raise_signal(signal.SIGTERM)
    if stop.agreed(cpu):
        break
stop.settle()
results["cadence"] = [reductions, step, stop.reason()]
print("RESULT " + json.dumps(results), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow  # two ranks
def test_ranks_agree_on_the_reason_at_the_same_steps(tmp_path):
    script = f"import sys; sys.argv[1:1] = [{str(tmp_path / 'rendezvous')!r}]\n{AGREEING_RANK}"
    outputs = processes.python_ranks(script, 2, timeout=300, cwd=REPO_ROOT)
    ranks = [json.loads(out.split("RESULT ")[1]) for out in outputs]
    for case, wallclock in (("deadline", True), ("signal", False)):
        results = [rank[case] for rank in ranks]
        assert [result[:2] for result in results] == [[[False, True], wallclock]] * 2
    assert results[0][2] == "SIGTERM received"
    assert results[1][2] == "a stop signal on another rank"
    # Ranks of different speeds reduce their flags at the same steps, not at every step, and
    # stop at the same step after the signal.
    (reductions, stopped, reason), (reductions_1, stopped_1, _) = (r["cadence"] for r in ranks)
    assert reductions == reductions_1 and stopped == stopped_1 > 40, (reductions, reductions_1)
    assert len(reductions) < stopped / 2 and reason == "SIGTERM received"


def test_agreements_come_about_every_agree_every_s():
    assert [agreement_cadence(s, 0.5) for s in (0.01, 0.2, 0.5, 3.0, 0.0)] == [50, 2, 1, 1, 1]
    assert agreement_cadence(0.01, 0.0) == 1


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
