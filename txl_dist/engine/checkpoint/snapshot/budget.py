"""The host memory of asynchronous saves' snapshots: said at start-up, reserved once training's
peak is known, and asked for before each save (else that save is synchronous)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from txl_dist.engine.checkpoint.snapshot import memory
from txl_dist.engine.checkpoint.snapshot.arena import HostArena
from txl_dist.model import TXLConfig
from txl_dist.process import resident
from txl_dist.process.dist import World

log = logging.getLogger(__name__)


@dataclass
class SnapshotBudget:
    """This rank's snapshot memory; every rank calls it at the same moments (collectives)."""

    engine: Any
    """The DeepSpeed engine whose states a snapshot holds."""
    model: TXLConfig
    """The model, whose memories a snapshot holds too."""
    rows_per_rank: int
    """Stream rows per rank: the memories' rows."""
    world: World
    """This rank and the world size."""
    available_memory: Callable[[], int] = memory.available_bytes
    """Bytes of host memory this machine has available for snapshots, asked before each
    asynchronous save (a test injects a small figure to see the synchronous fallback)."""
    arena: HostArena = field(default_factory=HostArena)
    """The host memory snapshots are serialized into, reused by each save."""
    updates: int = 0
    """Optimizer updates this run (the arena is reserved once one step ran)."""

    @property
    def reserved_bytes(self) -> int:
        """Host memory this rank holds for its snapshots."""
        return self.arena.held

    def snapshot_bytes(self) -> int:
        """This rank's snapshot of an asynchronous save, in host memory."""
        return memory.rank_bytes(self.engine, self.model, self.rows_per_rank)

    def announce(self) -> None:
        """Rank 0 says how much host memory the snapshots take (at start-up)."""
        mine = self.snapshot_bytes()
        sizes = [0] * self.world.world_size
        dist.all_gather_object(sizes, mine)
        if self.world.is_main:
            log.info(memory.sizes_line(sizes, self.available_memory()))

    def before_update(self, asynchronous: bool) -> None:
        """Count an optimizer update; while saves are `asynchronous`, the first marks where the
        steps' peak starts (not start-up's), the second reserves the arena beside the peak."""
        self.updates += 1
        if asynchronous and self.updates == 1:
            resident.mark()
        if asynchronous and self.updates == 2:
            self._reserve()

    def _reserve(self) -> None:
        """Where every machine has room for its ranks' snapshots beside training's peak, each
        rank reserves its snapshot's memory now, on a thread; rank 0 says which. Called once a
        step has run: at start-up that peak is unknown (lm1b_base's first step doubles a rank's
        memory), and the moments are yet to come."""
        mine = self.snapshot_bytes()
        growth = memory.moments_to_come(self.engine.optimizer, in_host_memory=True)
        needed = mine + growth + memory.transient_bytes()
        room = memory.room(needed, self.available_memory)
        if room.fits:
            self.arena.reserve(mine)  # else each save asks again, and allocates what it takes
        if self.world.is_main:
            log.info(memory.reserved_line(room, mine))

    def room_for_snapshot(self, step: int) -> bool:
        """Whether every machine has host memory for what its ranks' snapshots need beyond what
        their arenas hold, beside training's peak; if not, rank 0 warns and every rank saves
        synchronously (the ranks agree)."""
        more = max(0, self.snapshot_bytes() - self.arena.held)  # the arena holds the rest
        needed = more + memory.transient_bytes()
        room = memory.room(needed, self.available_memory)
        if room.shortage and self.world.is_main:
            log.warning(memory.synchronous_line(room.shortage, step))
        return room.fits
