"""DeepSpeed's collectives through shared memory when all CPU ranks are on one machine.

gloo sends every tensor through TCP on the loopback device. DeepSpeed's CPU accelerator also
builds a shared-memory all-reduce kernel (`torch.ops.deepspeed.inference_all_reduce_`, made for
inference) and sets it up in every CPU run whose ranks are all local (LOCAL_SIZE equal to the
world size), but training never calls it. `route_through_shared_memory` has DeepSpeed's own
collectives use it: ZeRO's gradient all-reduce, its gradient-norm sum and its all-gather of the
updated parameters (an all-gather is an all-reduce of each rank's slice among zeros). On the
tiny config's 2-rank ZeRO-2 bf16 step, the time in gloo fell from 18-19 ms to 2 ms and the step
from 74-80 ms to 67-73 ms (`bench/engine_overhead.py --nproc 2 --stage 2 --dtype bf16`).

Only synchronous sums and all-gathers over the whole world, of contiguous CPU tensors in a dtype
the kernel has vector code for on this CPU, take the shared-memory path; anything else (max,
subgroups, async calls, integer tensors, ranks on several machines) stays on gloo. The kernel
adds the ranks' values in rank order on every rank, so every rank gets the same bits, run after
run. It waits for its peers without a timeout, with the GIL released: a rank that stops is
caught by the watchdog's phase deadline (engine.watchdog), not by the collective.

DeepSpeed opens each rank's buffer, /dev/shm/deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_
<MASTER_PORT>_<rank>, with O_CREAT but not O_EXCL: a name another user created first (mode 0666)
would be used, and that user would read and write our gradients. The collectives take the
kernel only when every rank's buffer is a regular file of ours that no one else may open;
otherwise they all stay on gloo.
"""

from __future__ import annotations

import os
import stat

import torch
import torch.distributed as dist

KERNEL_NAME = "deepspeed_shm_comm"  # the op's name: DeepSpeed's ShareMemCommBuilder.NAME
# bf16 / fp16 kernels need AVX-512BW (level 2), the fp32 one AVX2 (level 1): DeepSpeed's
# `vector_kernel_level()`. Other dtypes have no kernel.
KERNEL_LEVEL = {torch.float32: 1, torch.bfloat16: 2, torch.float16: 2}


def kernel_needs_building() -> bool:
    """Whether starting the process group will JIT-build the kernel (about a minute of silence):
    DeepSpeed was installed without it prebuilt, and the extensions cache holds no build yet.

    DeepSpeed builds it in every CPU run, one process included, into TORCH_EXTENSIONS_DIR
    (process.dist points it into the environment) under the op's name.
    """
    import deepspeed.ops
    from deepspeed.git_version_info import installed_ops
    from torch.utils.cpp_extension import get_default_build_root

    if installed_ops.get(KERNEL_NAME) or not deepspeed.ops.__compatible_ops__.get(KERNEL_NAME):
        return False
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    return not os.path.exists(os.path.join(root, KERNEL_NAME, f"{KERNEL_NAME}.so"))


def route_through_shared_memory(world_size: int) -> bool:
    """Send DeepSpeed's eligible collectives through its shared-memory kernel, if it is set up.

    Returns whether it is. Call once, after `deepspeed.init_distributed`.
    """
    from deepspeed.comm import comm

    backend = comm.cdb
    level = getattr(backend, "shm_vector_kernel_level", 0)
    if (
        world_size < 2
        or getattr(backend, "shm_comm_op", None) is None
        or level == 0
        or os.environ.get("LOCAL_SIZE") != str(world_size)  # the kernel's own test at setup
        or not _buffers_are_private(world_size)
    ):
        return False
    dtypes = {dtype for dtype, needed in KERNEL_LEVEL.items() if level >= needed}
    backend.all_reduce = _all_reduce(backend.all_reduce, dtypes, world_size)
    backend.all_gather_into_tensor = _all_gather(backend.all_gather_into_tensor, dtypes, world_size)
    return True


def buffer_path(rank: int) -> str:
    """The /dev/shm file DeepSpeed's kernel maps for this rank (its own naming)."""
    name = (
        f"deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
        f"{os.environ.get('MASTER_PORT', '')}_{rank}"
    )
    return os.path.join("/dev/shm", name)


def is_ours(path: str) -> bool:
    """Whether path is a regular file of this user that no other user may open."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == os.getuid()
        and info.st_mode & 0o077 == 0
        and info.st_nlink == 1
    )


def _buffers_are_private(world_size: int) -> bool:
    """Whether every rank's buffer is ours alone, agreed by all ranks (over gloo).

    A buffer planted by someone else is never replaced by them once we use it: /dev/shm is
    sticky, so only its owner can remove a name.
    """
    private = all(is_ours(buffer_path(rank)) for rank in range(world_size))
    agreed = torch.tensor([int(private)])
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return bool(agreed.item())


def _fits(tensor: torch.Tensor, dtypes: set, group, world_size: int) -> bool:
    """Whether the kernel can take this tensor and group (a group of world_size is the world)."""
    return (
        tensor.device.type == "cpu"
        and tensor.dtype in dtypes
        and tensor.is_contiguous()
        and (group is None or dist.get_world_size(group) == world_size)
    )


def _is_sum(op) -> bool:
    """DeepSpeed passes its own ReduceOp enum or torch's."""
    return op == dist.ReduceOp.SUM or getattr(op, "name", None) == "SUM"


def _all_reduce(gloo_all_reduce, dtypes: set, world_size: int):
    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if async_op or not _is_sum(op) or not _fits(tensor, dtypes, group, world_size):
            return gloo_all_reduce(tensor, op, group, async_op)
        torch.ops.deepspeed.inference_all_reduce_(tensor)
        return None

    return all_reduce


def _all_gather(gloo_all_gather, dtypes: set, world_size: int):
    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        own = (
            None if async_op else _own_slot(output_tensor, input_tensor, group, dtypes, world_size)
        )
        if own is None:
            return gloo_all_gather(
                output_tensor=output_tensor, input_tensor=input_tensor, group=group,
                async_op=async_op,
            )  # fmt: skip
        if own.data_ptr() != input_tensor.data_ptr():
            own.copy_(input_tensor.view(-1))
        n, rank, flat = own.numel(), dist.get_rank(group), output_tensor.view(-1)
        flat[: rank * n].zero_()
        flat[(rank + 1) * n :].zero_()
        torch.ops.deepspeed.inference_all_reduce_(output_tensor)  # x + 0 is exact: a gather
        return None

    return all_gather_into_tensor


def _own_slot(output: torch.Tensor, input: torch.Tensor, group, dtypes: set, world_size: int):
    """This rank's slice of the flat output when the kernel can gather into it, else None."""
    n = input.numel()
    if not (
        _fits(output, dtypes, group, world_size)
        and input.dtype == output.dtype
        and input.is_contiguous()
        and output.numel() == n * world_size
    ):
        return None
    own = output.view(-1).narrow(0, dist.get_rank(group) * n, n)
    # ZeRO gathers in place (its input is this rank's slice of the output). An input anywhere
    # else in the output would be zeroed before it is read.
    same_memory = input.untyped_storage().data_ptr() == output.untyped_storage().data_ptr()
    return None if same_memory and input.data_ptr() != own.data_ptr() else own
