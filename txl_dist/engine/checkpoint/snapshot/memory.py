"""The host memory of an asynchronous save's snapshot: how much, and whether the ranks have room.

A snapshot holds a rank's serialized files until its background write: its DeepSpeed files (the
model states where this rank writes them, its optimizer shard), its memories and small records
(RNG, client state, DeepSpeed's config). torch.save writes each tensor's whole storage, so the
size is known before the snapshot is taken: from the storages the engine holds (`rank_bytes`,
before each save and at start-up; txl-inspect's estimate from the config alone is
model.accounting.snapshot_bytes).
Before each asynchronous save the ranks compare their machines' needs with the memory available
there (`Room`); if one machine is short, every rank saves synchronously that time.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterable
from typing import Any

import psutil
import torch
import torch.distributed as dist

from txl_dist.model.accounting import SNAPSHOT_RECORD_BYTES, memories_bytes
from txl_dist.model.config import TXLConfig
from txl_dist.process import resident

# A machine has room when its memory available covers its ranks' snapshots, a quarter more for
# serialization's growing buffers, and this much left over for training and the system.
MARGIN = 0.25
RESERVE_BYTES = 512 << 20

GIB = 1024**3
# Each of our optimizers (Adam, AdamW, LAMB) keeps two moments per parameter, as the parameter,
# and torch's Adam a step count too (a float32 scalar tensor).
MOMENTS = 2
STEP_BYTES = 4


def rank_bytes(engine: Any, model: TXLConfig, rows_per_rank: int) -> int:
    """This rank's snapshot: its DeepSpeed files' storages, its memories and the records."""
    dtype_bytes = next(engine.module.parameters()).element_size()
    memories = memories_bytes(model, rows_per_rank, dtype_bytes)
    return deepspeed_bytes(engine) + memories + SNAPSHOT_RECORD_BYTES


def deepspeed_bytes(engine: Any) -> int:
    """Storages this rank's DeepSpeed save writes: the model states file where this rank writes
    one (holding the optimizer too without ZeRO), and its ZeRO optimizer file if any."""
    total = 0
    if engine.save_non_zero_checkpoint:
        # Under ZeRO-3 the file's parameters are empty placeholders; only buffers hold data.
        if engine.zero_optimization_partition_weights():
            in_model_file = list(engine.module.buffers())
        else:
            in_model_file = list(engine.module.state_dict().values())
        if not engine.zero_optimization():
            in_model_file += optimizer_tensors(engine.optimizer)
        total += storage_bytes(in_model_file)
    if engine.save_zero_checkpoint:
        total += storage_bytes(optimizer_tensors(engine.optimizer))
    saves_optimizer = engine.save_zero_checkpoint or (
        engine.save_non_zero_checkpoint and not engine.zero_optimization()
    )
    return total + (moments_to_come(engine.optimizer) if saves_optimizer else 0)


def optimizer_tensors(optimizer: Any) -> list[torch.Tensor]:
    """The tensors an optimizer's state dict holds: the fp32 master weights and the state
    (Adam's moments) of the torch optimizer inside DeepSpeed's wrappers."""
    inner, params = _masters(optimizer)
    state = [v for per_param in inner.state.values() for v in per_param.values()]
    return params + [v for v in state if torch.is_tensor(v)]


def moments_to_come(optimizer: Any, in_host_memory: bool = False) -> int:
    """Bytes of the moments the optimizer's first step creates (none once it stepped): a
    snapshot's size is known at start-up, before any step. `in_host_memory`: only those of
    master weights in host memory (the CPU accelerator's, or ZeRO-Offload's), which training
    itself is yet to take there."""
    inner, params = _masters(optimizer)
    if any(inner.state.get(p) for p in params):
        return 0
    if in_host_memory:
        params = [p for p in params if p.device.type == "cpu"]
    return sum(MOMENTS * p.numel() * p.element_size() + STEP_BYTES for p in params)


def _masters(optimizer: Any) -> tuple[Any, list[torch.Tensor]]:
    """The torch optimizer inside DeepSpeed's wrappers, and the fp32 master weights it steps
    (this rank's partition under ZeRO)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # a plain torch optimizer has none
    params = [p for group in inner.param_groups for p in group["params"]]
    # ZeRO-3 hands its fp32 partitions to the torch optimizer only while it steps.
    return inner, params + getattr(optimizer, "fp32_partitioned_groups_flat", [])


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes torch.save writes for `tensors`: each distinct storage once, whole."""
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


@dataclasses.dataclass
class Room:
    """Whether every machine has memory available for its ranks' snapshots, agreed by all."""

    fits: bool
    """True on every rank when every machine has room, False on every rank otherwise."""
    shortage: str | None = None
    """Why not: which machine has how much available, and what its ranks need."""


def room(needed: int, available: Callable[[], int]) -> Room:
    """Gather every rank's machine, snapshot bytes and available memory (a collective), then
    decide as `room_among` does: the same answer on every rank."""
    mine = (socket.gethostname(), needed, available())
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return room_among(everyone)


def room_among(everyone: list[tuple[str, int, int]]) -> Room:
    """Whether each machine of (machine, snapshot bytes, available bytes), one per rank, has
    room: the sum of its ranks' snapshots plus the margin within the least available any of
    them saw."""
    machines: dict[str, list[tuple[int, int, int]]] = {}
    for rank, (host, need, free) in enumerate(everyone):
        machines.setdefault(host, []).append((rank, need, free))
    for host, ranks in machines.items():
        need = sum(n for _, n, _ in ranks) * (1 + MARGIN) + RESERVE_BYTES
        rank, _, free = min(ranks, key=lambda r: r[2])
        if free < need:
            return Room(False, _shortage(host, rank, len(ranks), free, need))
    return Room(True)


def _shortage(host: str, rank: int, ranks: int, free: int, need: float) -> str:
    return (
        f"{host} (rank {rank}) has {free / GIB:.2f} GiB of host memory available, the snapshots "
        f"of its {ranks} rank(s) need {need / GIB:.2f} GiB beside training's peak, with the margin"
    )


def synchronous_line(shortage: str, step: int) -> str:
    """The warning of a save made synchronously for want of room."""
    return f"{shortage}: saving step {step} synchronously (train.async_save)"


def reserved_line(room: Room, size: int) -> str:
    """Rank 0's line once the snapshots' memory is reserved (`size` bytes on rank 0), or not."""
    if room.fits:
        return f"asynchronous saves: {size / GIB:.2f} GiB of host memory reserved on rank 0"
    return f"asynchronous saves: no host memory reserved, {room.shortage}; each save asks again"


def sizes_line(sizes: list[int], available: int) -> str:
    """The start-up line: every rank's snapshot (rank 0's and the largest other) and what this
    machine has available."""
    others = f", the others up to {max(sizes[1:]) / GIB:.2f} GiB" if len(sizes) > 1 else ""
    return (
        f"asynchronous saves (train.async_save) hold a snapshot in host memory: "
        f"{sizes[0] / GIB:.2f} GiB on rank 0{others}; {available / GIB:.1f} GiB available here"
    )


def available_bytes() -> int:
    """Host memory available to new allocations without swapping (psutil's `available`)."""
    return psutil.virtual_memory().available


def transient_bytes() -> int:
    """What this process held at its peak since the first optimizer update (the checkpointer
    marks it) beyond what it holds now: between steps, what the next step takes again
    (activations, temporaries), beside a snapshot kept through it."""
    return resident.beyond_now_at_peak_since_mark()
