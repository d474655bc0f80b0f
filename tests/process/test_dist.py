"""Process groups: a single process, or ranks all on one machine, listen on no network interface
(no unauthenticated TCPStore), and CPU ranks leave no shared memory behind.

gloo keeps a listener for peers even when it has none; it must stay on the loopback device.
"""

import ast
import logging
import os
import sys
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import free_port
from txl_dist.process import dist, restarts
from txl_dist.process.dist import say_if_building_the_kernel
from txl_dist.process.threads import threads_for

LISTENING = """
sockets = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        sockets.add(target[8:-1])
listening = [
    line.split()[1]
    for table in ("/proc/net/tcp", "/proc/net/tcp6")
    for line in open(table).read().splitlines()[1:]
    if line.split()[3] == "0A" and line.split()[9] in sockets  # 0A: LISTEN
]
print("LISTENING", listening, flush=True)
"""
SCRIPT = """
import os, torch, torch.distributed as dist
from txl_dist.process.dist import World, init_distributed
init_distributed(World(0, 1, 0))
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 1
"""
SCRIPT += LISTENING


LOOPBACK = ("0100007F", "00000000000000000000000001000000")  # 127.0.0.1, ::1 in /proc/net


def test_one_process_listens_on_no_network_interface():
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1"}  # the reported setting
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        env.pop(name, None)
    proc = processes.run([sys.executable, "-c", SCRIPT], timeout=300, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_loopback_only(proc.stdout)


def assert_loopback_only(output: str) -> None:
    listening = ast.literal_eval(output.split("LISTENING ")[1].splitlines()[0])
    assert all(address.split(":")[0] in LOOPBACK for address in listening), listening


SHM_RANK = """
import os, sys, torch, torch.distributed as dist
from txl_dist.process.dist import World, init_distributed
rank = int(sys.argv[1])
init_distributed(World(rank, 2, rank))
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 2
name = f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{os.environ['MASTER_PORT']}_{rank}"
print("LEFT", os.path.exists(os.path.join("/dev/shm", name)), flush=True)
"""
SHM_RANK += LISTENING + "dist.barrier()\n"


@pytest.mark.slow  # two ranks
def test_two_cpu_ranks_listen_on_loopback_alone_and_leave_no_shared_memory_buffer_behind():
    # The rendezvous TCPStore (rank 0's) listened on every interface, unauthenticated.
    # DeepSpeed's CPU op creates a 66 MiB /dev/shm buffer per rank and never removes it.
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["LOCAL_SIZE"] = "2"  # what the deepspeed launcher sets: all ranks on one machine
    outputs = processes.python_ranks(SHM_RANK, 2, timeout=300, cwd=REPO_ROOT, env=env)
    assert [out.split("LEFT ")[1].splitlines()[0] for out in outputs] == ["False", "False"]
    for output in outputs:
        assert_loopback_only(output)
    assert not list(Path("/dev/shm").glob(f"deepspeed_*_{env['MASTER_PORT']}_*"))


def test_a_first_run_says_before_the_kernel_build_and_later_runs_do_not(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # an empty cache: a first run
    with caplog.at_level(logging.INFO, logger="txl_dist.process.dist"):
        say_if_building_the_kernel()
        assert "building DeepSpeed's CPU shared-memory kernel" in caplog.text
        caplog.clear()
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", sys.prefix + "/torch_extensions")
        say_if_building_the_kernel()  # this environment's cache: built by the runs above
    assert caplog.text == ""


def test_every_guarded_rank_of_a_start_names_one_rendezvous_file(monkeypatch):
    # Under a restarting launcher each rank's parent is its own guard: the file is named after
    # the launcher (the guards' parent) and the start, or the ranks never meet.
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    monkeypatch.setenv(restarts.LAUNCHER_ENV, "4242")
    assert dist._job_store().endswith("rendezvous-29500-4242-2")
    monkeypatch.delenv(restarts.LAUNCHER_ENV)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT")
    assert dist._job_store().endswith(f"rendezvous-29500-{os.getppid()}-0")


def test_a_rank_bound_to_one_gpu_takes_the_one_it_sees():
    """srun --gpu-bind leaves each task one visible GPU while SLURM_LOCALID counts the node's."""
    assert [dist.device_index(rank, 1) for rank in range(4)] == [0, 0, 0, 0]
    assert [dist.device_index(rank, 8) for rank in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("variable", ["LOCAL_WORLD_SIZE", "LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"])
def test_the_nodes_ranks_share_its_cores(monkeypatch, variable):
    for name in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    cores = len(os.sched_getaffinity(0))
    assert dist.local_ranks() == 1
    assert threads_for(cores, busy=0.0, ranks=dist.local_ranks()) == cores
    monkeypatch.setenv(variable, str(2 * cores))  # more ranks than cores: one thread each
    assert threads_for(cores, busy=0.0, ranks=dist.local_ranks()) == 1
