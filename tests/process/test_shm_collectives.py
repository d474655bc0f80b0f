"""DeepSpeed's collectives through shared memory on one machine: the same bits as gloo, gloo for
everything the kernel cannot take, and gloo alone when the ranks are not all local or a buffer
name was taken by someone else first."""

import json
import os

import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from tests.integration.runs import free_port
from txl_dist.process.shm_collectives import KERNEL_NAME, kernel_needs_building

pytestmark = pytest.mark.slow  # every test runs two ranks

RANK = """
import json, sys, torch, torch.distributed as dist
import deepspeed.comm as ds
from txl_dist.process.dist import World, end_distributed, init_distributed

rank = int(sys.argv[1])
init_distributed(World(rank, 2, rank))
gloo_all_reduce, gloo_all_gather = dist.all_reduce, dist.all_gather_into_tensor
kernel = torch.ops.deepspeed.inference_all_reduce_
kernel_calls = []


def counted_kernel(tensor):
    kernel_calls.append(tensor.numel())
    return kernel(tensor)


torch.ops.deepspeed.inference_all_reduce_ = counted_kernel
torch.manual_seed(rank)
report = {}


def all_reduce(name, tensor, **kwargs):
    expected = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype)
    expected.copy_(tensor)
    gloo_all_reduce(expected, op=kwargs.get("op", dist.ReduceOp.SUM))
    before = len(kernel_calls)
    work = ds.all_reduce(tensor, **kwargs)
    if work is not None:
        work.wait()
    report[name] = dict(equal=torch.equal(tensor, expected), kernel=len(kernel_calls) - before)


def all_gather(name, part_of, size, dtype):
    out = torch.empty(2 * size, dtype=dtype)
    mine = torch.randn(size).to(dtype)
    expected = torch.empty_like(out)
    gloo_all_gather(expected, mine)
    if part_of:  # ZeRO's way: the input is this rank's slice of the output
        inp = out[rank * size : (rank + 1) * size]
        inp.copy_(mine)
        out[(1 - rank) * size : (2 - rank) * size].fill_(7)
    else:
        inp = mine
    before = len(kernel_calls)
    ds.all_gather_into_tensor(out, inp)
    report[name] = dict(equal=torch.equal(out, expected), kernel=len(kernel_calls) - before)


all_reduce("bf16 small", torch.randn(5).bfloat16())
all_reduce("bf16 1.4 MB", torch.randn(700_000).bfloat16())  # the kernel's large-tensor path
all_reduce("fp32 40 MB", torch.randn(10_000_000))  # more than one 32 MB kernel chunk
all_reduce("fp32 max", torch.randn(1000), op=dist.ReduceOp.MAX)
all_reduce("int64", torch.randint(0, 100, (1000,)))
all_reduce("not contiguous", torch.randn(100, 2)[:, 0])
all_reduce("async", torch.randn(1000), async_op=True)
all_gather("gather in place", True, 1_211_110, torch.bfloat16)
all_gather("gather from another tensor", False, 1000, torch.float32)
all_gather("gather int64", False, 10, torch.int64)
print("REPORT " + json.dumps(report), flush=True)
end_distributed()
"""


def run_ranks(local_size: str, port: int | None = None) -> list[dict]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port or free_port())}
    env["LOCAL_SIZE"] = local_size  # the deepspeed launcher's: ranks on this machine
    outputs = processes.python_ranks(RANK, 2, timeout=300, cwd=REPO_ROOT, env=env)
    return [json.loads(out.split("REPORT ")[1].splitlines()[0]) for out in outputs]


KERNEL = (
    "bf16 small",
    "bf16 1.4 MB",
    "fp32 40 MB",
    "gather in place",
    "gather from another tensor",
)
GLOO = ("fp32 max", "int64", "not contiguous", "async", "gather int64")


@pytest.fixture(scope="module")
def shared_memory():
    return run_ranks(local_size="2")


@pytest.mark.parametrize("rank", [0, 1])
def test_on_one_machine_sums_and_gathers_take_the_kernel_and_equal_gloo(shared_memory, rank):
    report = shared_memory[rank]
    assert all(entry["equal"] for entry in report.values()), report
    assert {name: report[name]["kernel"] for name in KERNEL} == dict.fromkeys(KERNEL, 1)
    assert {name: report[name]["kernel"] for name in GLOO} == dict.fromkeys(GLOO, 0)


def test_ranks_on_several_machines_use_gloo_alone():
    for report in run_ranks(local_size="1"):  # what each node of a 2-node job says
        assert all(entry["equal"] for entry in report.values()), report
        assert all(entry["kernel"] == 0 for entry in report.values()), report


def test_the_kernel_needs_building_until_the_extensions_cache_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert kernel_needs_building()
    (tmp_path / KERNEL_NAME).mkdir()
    (tmp_path / KERNEL_NAME / f"{KERNEL_NAME}.so").write_bytes(
        b""
    )  # where torch's JIT build leaves it
    assert not kernel_needs_building()


def test_a_buffer_planted_by_another_user_keeps_every_rank_on_gloo():
    # DeepSpeed opens its buffer names with O_CREAT but not O_EXCL: a file another user made
    # first, readable and writable by all, would carry our gradients.
    port = free_port()
    planted = f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_1"
    fd = os.open(planted, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    os.fchmod(fd, 0o666)
    if os.getuid() == 0:
        os.fchown(fd, 65534, 65534)  # nobody's
    os.close(fd)
    try:
        for report in run_ranks(local_size="2", port=port):
            assert all(entry["equal"] for entry in report.values()), report
            assert all(entry["kernel"] == 0 for entry in report.values()), report
        assert os.path.exists(planted)  # not ours to remove
    finally:
        os.unlink(planted)
