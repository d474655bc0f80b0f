"""Rank and world size from whichever launcher started us, and process-group setup.

Works under `deepspeed`, `torchrun`, `srun` (SLURM variables) and plain `python` (one process).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch

from txl_dist.process.restarts import env_int, launcher_pid, restart_count
from txl_dist.process.shm_collectives import (
    buffer_path,
    is_ours,
    kernel_needs_building,
    route_through_shared_memory,
)
from txl_dist.process.threads import choose_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    """Where this process sits in the job."""

    rank: int
    """Global rank."""
    world_size: int
    """Number of processes."""
    local_rank: int
    """Rank on this node (selects the device)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def device_index(local_rank: int, visible_devices: int) -> int:
    """This rank's device among those it sees: all of the node's, or where the site binds one
    GPU per task (srun --gpu-bind), only its own, while its local rank still counts the node's."""
    return local_rank % visible_devices


def local_ranks() -> int:
    """How many ranks the launcher starts on this machine."""
    return env_int("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", default=1)


def world_from_env() -> World:
    """Read the launcher's variables without starting anything (so config errors come first)."""
    local_ranks()  # read now too: a variable that is no number ends the start in one line
    return World(
        rank=env_int("RANK", "SLURM_PROCID", default=0),
        world_size=env_int("WORLD_SIZE", "SLURM_NTASKS", default=1),
        local_rank=env_int("LOCAL_RANK", "SLURM_LOCALID", default=0),
    )


def _private_dir() -> str:
    """A directory only this user can enter, removed at exit."""
    path = tempfile.mkdtemp(prefix="txl-dist-")  # mode 0700
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _all_ranks_local(world: World) -> bool:
    """Whether the launcher says every rank runs on this machine."""
    return os.environ.get("LOCAL_SIZE") == str(world.world_size)


def _job_store() -> str:
    """The rendezvous file every local rank of this start names alike, in this user's own folder.

    The launcher (their common parent, or their guards' under a restarting launcher) and its
    port tell jobs apart, the restart count a job's starts: a killed start leaves its file.
    """
    folder = os.path.join(tempfile.gettempdir(), f"txl-dist-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{folder} is not a folder of this user's alone: remove it")
    start = f"{os.environ.get('MASTER_PORT')}-{launcher_pid()}-{restart_count()}"
    return os.path.join(folder, f"rendezvous-{start}")


def init_distributed(world: World, timeout_s: float = 600.0) -> torch.device:
    """Start the process group (nccl on GPUs, gloo on CPU) and return this rank's device.

    timeout_s bounds every collective: when a rank dies, the others fail after it instead of
    blocking (across nodes no launcher notices the death for them).
    """
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    rendezvous = _rendezvous(world)
    build_with_this_environment()
    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        # Before the first allocation: evaluation's many key lengths fragment the fixed-size
        # segments of the default allocator.
        if not {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"} & os.environ.keys():
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        accelerator.set_device(device_index(world.local_rank, accelerator.device_count()))
    if accelerator.device_name() == "cpu" and world.is_main:
        say_if_building_the_kernel()
    deepspeed.init_distributed(
        dist_backend=accelerator.communication_backend_name(),
        timeout=timedelta(seconds=timeout_s),
        **rendezvous,
    )
    if accelerator.device_name() == "cpu" and world.world_size > 1:
        route_through_shared_memory(world.world_size)
        _unlink_shm_buffer(world.rank)
    # After the rendezvous: the machine's other ranks no longer import, so what is busy is
    # someone else's (srun sets no OMP_NUM_THREADS, torchrun 1, deepspeed none).
    choose_threads(local_ranks(), say=world.is_main)
    return torch.device(accelerator.device_name(world.local_rank))


def _rendezvous(world: World) -> dict:
    """The launcher's variables DeepSpeed reads, set from `world`; how the ranks meet
    (init_process_group's arguments): a store file where every rank is on this machine."""
    os.environ.setdefault("RANK", str(world.rank))
    os.environ.setdefault("WORLD_SIZE", str(world.world_size))
    os.environ.setdefault("LOCAL_RANK", str(world.local_rank))
    # DeepSpeed sets up its shared-memory collectives (shm_collectives) when LOCAL_SIZE, which
    # its launcher sets, equals the world size; torchrun says the same as LOCAL_WORLD_SIZE.
    if os.environ.get("LOCAL_WORLD_SIZE"):
        os.environ.setdefault("LOCAL_SIZE", os.environ["LOCAL_WORLD_SIZE"])
    rendezvous = {}
    if world.world_size == 1:
        # One process needs no rendezvous: a store file in a private directory rather than
        # a TCPStore listening, unauthenticated, on the network.
        rendezvous = dict(init_method=f"file://{_private_dir()}/store", rank=0, world_size=1)
        # gloo still opens a listener for its (absent) peers: keep it on the loopback device.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # DeepSpeed checks they are set
        os.environ.setdefault("MASTER_PORT", "0")
    elif _all_ranks_local(world):
        # Ranks on one machine meet through a store file of this user's rather than a TCPStore
        # listening, unauthenticated, on every interface; gloo's own listeners stay on loopback.
        rendezvous = dict(
            init_method=f"file://{_job_store()}", rank=world.rank, world_size=world.world_size
        )
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return rendezvous


KERNEL_NOTICE = (
    "building DeepSpeed's CPU shared-memory kernel for this environment: about a minute, once"
)


def build_with_this_environment() -> None:
    """Point DeepSpeed's JIT builds at this environment's tools and cache."""
    # DeepSpeed JIT-builds its CPU communication op with the first `ninja` on PATH. The one pip
    # installs beside DeepSpeed and a system one record builds differently, so runs from an
    # activated shell and from a plain one (quickstart.sh) rebuilt it in turn, minutes each.
    os.environ["PATH"] = os.pathsep.join(
        [sysconfig.get_path("scripts"), os.environ.get("PATH", os.defpath)]
    )
    # It builds into a cache every environment of the user shares (~/.cache/torch_extensions):
    # checkouts with their own venv rebuilt it in turn and waited on each other's build lock.
    # One cache per environment; ranks started over ssh (no inherited variables) agree on it.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))


def prebuild_cpu_kernel(say: Callable[[str], None] = log.info) -> bool:
    """Build DeepSpeed's CPU shared-memory kernel now (launch/install.sh does), so that no first
    run waits a silent minute for it; False where there is nothing to build (a GPU machine, a
    DeepSpeed with the op prebuilt, a cache that has it)."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.comm.torch import build_shm_op

    build_with_this_environment()
    if get_accelerator().device_name() != "cpu" or not kernel_needs_building():
        return False
    say(KERNEL_NOTICE)
    with contextlib.redirect_stdout(sys.stderr):  # its own "built successfully" line
        build_shm_op()
    return True


def say_if_building_the_kernel() -> None:
    """The first CPU run in an environment waits while DeepSpeed builds its shared-memory kernel:
    say so before the silence, not after."""
    if kernel_needs_building():
        log.info(KERNEL_NOTICE)


def end_distributed(together: bool = True) -> None:
    """Leave the process group before the process exits, together with the other ranks.

    A rank that exits with its gloo group alive, while a peer still works (rank 0 writing a
    file), can abort in the group's teardown ("terminate called without an active exception").
    together=False skips the barrier: on an error path the other ranks may never reach it.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()


def _unlink_shm_buffer(rank: int) -> None:
    """Remove this rank's DeepSpeed shared-memory allreduce buffer from /dev/shm.

    DeepSpeed's CPU communication op creates one 66 MiB buffer per rank and never unlinks it:
    every run left them in /dev/shm, in RAM, until reboot. Every rank maps all of them while
    the process group starts; after a barrier no rank opens one again, so the names can go
    (the mappings live on until the processes exit). A name someone else created stays theirs.
    """
    import torch.distributed as dist

    dist.barrier()
    path = buffer_path(rank)
    if is_ours(path):  # not all ranks local: no buffer
        os.unlink(path)
