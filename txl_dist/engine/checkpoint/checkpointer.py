"""This run's checkpoints: when one is due, what it records, how it is saved and how many stay."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from data_pipeline.streams import TokenStreams
from txl_dist.config import RunConfig
from txl_dist.engine.checkpoint.parts import CheckpointPart, Place, rank_file
from txl_dist.engine.checkpoint.snapshot import memory as snapshot_memory
from txl_dist.engine.checkpoint.snapshot.arena import HostArena
from txl_dist.engine.checkpoint.snapshot.background import BackgroundSave
from txl_dist.engine.checkpoint.state import CHECKPOINT_DIR, CheckpointState
from txl_dist.engine.checkpoint.store.retention import prune
from txl_dist.engine.checkpoint.store.transaction import SaveTransaction
from txl_dist.process import preflight, resident
from txl_dist.process.dist import World

log = logging.getLogger(__name__)


@dataclass
class Checkpointer:
    """Saves complete checkpoints of this run; every rank calls it at the same steps."""

    parts: list[CheckpointPart]
    """What every checkpoint holds (build.py registers them; one is DeepSpeed's engine)."""
    facts: dict[str, Any]
    """What every record of this run says besides its step and parts (CheckpointState's
    fields: the run id, world size, rows, config and vocabulary)."""
    config: RunConfig
    """The run's config, recorded in every checkpoint (secrets left out)."""
    world: World
    """This rank and the world size."""
    rows_per_rank: int
    """Stream rows per rank and step: this rank's memories start at rank * rows_per_rank."""
    directory: str
    """The checkpoints directory, train.out_dir/checkpoints."""
    save_interval: int
    """Save every this many steps (train.save_interval); 0 saves only at the end and on a stop."""
    keep_last: int
    """Complete checkpoints of this run kept (train.keep_last); older ones are deleted."""
    needed_bytes: float
    """An estimate of one checkpoint's size, said when the disk is full."""
    saved_step: int | None = None
    """The step of the newest checkpoint this run holds (the resumed one's), None before any."""
    after_phase: Callable[[str, int], None] | None = None
    """Called with each save phase's name and step once every rank passed it (see
    transaction.py): a test injects it to stop or kill ranks inside a save."""
    async_save: bool = False
    """Write saves in the background (train.async_save): the loop waits only for DeepSpeed's
    state dicts to be taken, and for their serialization before the next optimizer update."""
    available_memory: Callable[[], int] = snapshot_memory.available_bytes
    """Bytes of host memory this machine has available for snapshots, asked before each
    asynchronous save (a test injects a small figure to see the synchronous fallback)."""
    _background: BackgroundSave | None = None
    _updates: int = 0  # optimizer updates this run (the arena is reserved once one step ran)
    _arena: HostArena = dataclasses.field(default_factory=HostArena)  # the snapshots' memory
    _group: Any = None  # the background saves' process group, made by the first one

    @classmethod
    def for_run(
        cls,
        parts: list[CheckpointPart],
        config: RunConfig,
        world: World,
        rows_per_rank: int,
        streams: TokenStreams,
        run_id: str,
        resumed_step: int | None,
    ) -> Checkpointer:
        """The checkpoints of `config`'s run `run_id` on `streams`' data, holding `parts`, which
        resumed at `resumed_step` (None: fresh); with async_save, rank 0 says what its
        snapshots take (a collective)."""
        facts = dict(
            run_id=run_id,
            world_size=world.world_size,
            global_rows=config.train.global_rows,
            rows_per_rank=rows_per_rank,
            config=config.public_dict(),  # secrets never reach a checkpoint
            vocab_size=streams.vocab_size,
            vocab_sha256=streams.manifest.vocab_sha256,
            level=streams.manifest.level,
        )
        checkpointer = cls(
            parts=parts,
            facts=facts,
            config=config,
            world=world,
            rows_per_rank=rows_per_rank,
            directory=os.path.join(config.train.out_dir, CHECKPOINT_DIR),
            save_interval=config.train.save_interval,
            keep_last=config.train.keep_last,
            needed_bytes=preflight.checkpoint_bytes(config),
            saved_step=resumed_step,
            async_save=config.train.async_save,
        )
        checkpointer.announce_snapshots()
        return checkpointer

    @property
    def engine(self) -> Any:
        """The DeepSpeed engine, whose files the DEEPSPEED part has a save write."""
        return next(p.state_dict() for p in self.parts if p.place is Place.DEEPSPEED)

    def due(self, step: int) -> bool:
        """Whether `step` ends a save interval."""
        return bool(self.save_interval) and step % self.save_interval == 0

    def holds(self, step: int) -> bool:
        """Whether the newest checkpoint is of `step` (the run's end needs no other save)."""
        return self.saved_step == step

    def save(self, step: int) -> str:
        """Save every part as checkpoint `step`; returns the path (with async_save, that of a
        checkpoint still being written: see `wait`)."""
        path = self.write(self.record(step))
        self.saved_step = step
        return path

    def record(self, step: int) -> CheckpointState:
        """What txl.json records: this run's facts and the states of the record's parts."""
        placed = {p.name: p.state_dict() for p in self.parts if p.place is Place.RECORD}
        return CheckpointState(step=step, parts=placed, **self.facts)

    def write(self, state: CheckpointState) -> str:
        """Write `state` and every rank's files as checkpoint `state.step`, then prune; returns
        its path. Raises CheckpointSaveError on every rank if any rank fails; with async_save,
        this or the previous save, once the previous one's background part ended."""
        self.wait()
        transaction = self._transaction(state)
        if not (self.async_save and self._room_for_snapshots(state.step)):
            return self._published(transaction.run(), state)
        if self._group is None:  # every rank saves at the same steps: a collective is safe
            self._group = dist.new_group(backend="gloo")
        transaction.group, transaction.arena = self._group, self._arena
        transaction.take_snapshot()
        self._background = BackgroundSave(
            lambda serialized: self._published(transaction.complete(serialized), state)
        )
        return os.path.join(self.directory, transaction.tag)

    @property
    def in_background(self) -> bool:
        """Whether the last save is still being written in the background."""
        return self._background is not None

    @property
    def reserved_bytes(self) -> int:
        """Host memory this rank holds for its snapshots."""
        return self._arena.held

    def snapshot_bytes(self) -> int:
        """This rank's snapshot of an asynchronous save, in host memory."""
        return snapshot_memory.rank_bytes(self.engine, self.config.model, self.rows_per_rank)

    def announce_snapshots(self) -> None:
        """Rank 0 says how much host memory the asynchronous saves' snapshots take (at start-up;
        a collective)."""
        if not self.async_save:
            return
        mine = self.snapshot_bytes()
        sizes = [0] * self.world.world_size
        dist.all_gather_object(sizes, mine)
        if self.world.is_main:
            log.info(snapshot_memory.sizes_line(sizes, self.available_memory()))

    def _reserve_arena(self) -> None:
        """Where every machine has room for its ranks' snapshots beside training's peak, each
        rank reserves its snapshot's memory now, on a thread (a collective); rank 0 says which.
        Called once a step has run: at start-up that peak is unknown (lm1b_base's first step
        doubles a rank's memory), and the moments are yet to come."""
        mine = self.snapshot_bytes()
        growth = snapshot_memory.moments_to_come(self.engine.optimizer, in_host_memory=True)
        needed = mine + growth + snapshot_memory.transient_bytes()
        room = snapshot_memory.room(needed, self.available_memory)
        if room.fits:
            self._arena.reserve(mine)  # else each save asks again, and allocates what it takes
        if self.world.is_main:
            log.info(snapshot_memory.reserved_line(room, mine))

    def _room_for_snapshots(self, step: int) -> bool:
        """Whether every machine has host memory for what its ranks' snapshots need beyond what
        their arenas hold, beside training's peak; if not, rank 0 warns and every rank saves
        synchronously (a collective: the ranks agree)."""
        more = max(0, self.snapshot_bytes() - self._arena.held)  # the arena holds the rest
        needed = more + snapshot_memory.transient_bytes()
        room = snapshot_memory.room(needed, self.available_memory)
        if room.shortage and self.world.is_main:
            log.warning(snapshot_memory.synchronous_line(room.shortage, step))
        return room.fits

    def before_update(self) -> None:
        """Return once the background save, if any, no longer reads the live model and
        optimizer tensors: call before each optimizer update, which changes them, not before
        an accumulation's other micro steps, which do not (every rank at the same updates: the
        second one reserves the snapshots' memory beside the peak since the first, a
        collective)."""
        if self._background is not None:
            self._background.serialized.wait()
        self._updates += 1
        if self.async_save and self._updates == 1:
            resident.mark()  # the peak beside a snapshot: the steps', not start-up's
        if self.async_save and self._updates == 2:
            self._reserve_arena()

    def wait(self) -> None:
        """Return once the background save, if any, is complete; raises its CheckpointSaveError
        (on every rank: the ranks agreed on it)."""
        background, self._background = self._background, None
        if background is not None:
            background.wait()

    def _transaction(self, state: CheckpointState) -> SaveTransaction:
        rank = self.world.rank
        return SaveTransaction(
            engine=self.engine,
            directory=self.directory,
            state=state,
            rank_files={
                rank_file(p.name, rank): p.state_dict()
                for p in self.parts
                if p.place is Place.RANK_FILE
            },
            main_files={p.name: p.state_dict() for p in self.parts if p.place is Place.MAIN_FILE},
            needed_bytes=self.needed_bytes,
            after_phase=self.after_phase,
        )

    def _published(self, tag: str, state: CheckpointState) -> str:
        """Prune once checkpoint `tag` is published; returns its path."""
        if self.world.rank == 0:
            prune(self.directory, self.keep_last, state.run_id)
        dist.barrier(group=self._group if self.async_save else None)
        return os.path.join(self.directory, tag)
