"""This run's checkpoints: when one is due, what it holds, how it is written, how many stay."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch.distributed as dist

from txl_dist.checkpoint_names import CHECKPOINT_DIR
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint.parts import CheckpointPart, Place, rank_file
from txl_dist.engine.checkpoint.size import checkpoint_bytes
from txl_dist.engine.checkpoint.snapshot.background import BackgroundSave
from txl_dist.engine.checkpoint.snapshot.budget import SnapshotBudget
from txl_dist.engine.checkpoint.state import CheckpointState
from txl_dist.engine.checkpoint.store.asynchronous import AsynchronousSave
from txl_dist.engine.checkpoint.store.retention import prune
from txl_dist.engine.checkpoint.store.transaction import SaveTransaction, SynchronousSave
from txl_dist.process.dist import World

Save = TypeVar("Save", bound=SaveTransaction)


@dataclass
class Checkpointer:
    """Saves complete checkpoints of this run; every rank calls it at the same steps."""

    parts: list[CheckpointPart]
    """What every checkpoint holds (parts.registry lists them; one is DeepSpeed's engine)."""
    facts: dict[str, Any]
    """What every record of this run says besides its step and parts (CheckpointState's
    fields: the run id, world size, rows, config and vocabulary)."""
    world: World
    """This rank and the world size."""
    directory: str
    """The checkpoints directory, train.out_dir/checkpoints."""
    save_interval: int
    """Save every this many steps (train.save_interval); 0 saves only at the end and on a stop."""
    keep_last: int
    """Complete checkpoints of this run kept (train.keep_last); older ones are deleted."""
    needed_bytes: float
    """An estimate of one checkpoint's size, said when the disk is full."""
    budget: SnapshotBudget
    """The host memory of asynchronous saves' snapshots."""
    saved_step: int | None = None
    """The step of the newest checkpoint this run holds (the resumed one's), None before any."""
    after_phase: Callable[[str, int], None] | None = None
    """Called with each save phase's name and step once every rank passed it (see
    store/transaction.py): a test injects it to stop or kill ranks inside a save."""
    async_save: bool = False
    """Write saves in the background (train.async_save): the loop waits only for DeepSpeed's
    state dicts to be taken, and for their serialization before the next optimizer update."""
    _background: BackgroundSave | None = None
    _group: Any = None  # the background saves' process group, made by the first one

    @classmethod
    def for_run(
        cls, parts: list[CheckpointPart], facts: dict[str, Any], config: RunConfig, world: World,
        resumed_step: int | None,
    ) -> Checkpointer:  # fmt: skip
        """The checkpoints of `config`'s run holding `parts`, whose records state `facts`,
        resumed at `resumed_step` (None: fresh); with async_save, rank 0 says what its
        snapshots take (a collective)."""
        engine = next(p.state_dict() for p in parts if p.place is Place.DEEPSPEED)
        budget = SnapshotBudget(engine, config.model, facts["rows_per_rank"], world)
        if config.train.async_save:
            budget.announce()
        t, needed = config.train, checkpoint_bytes(config)
        directory = os.path.join(t.out_dir, CHECKPOINT_DIR)
        return cls(parts, facts, world, directory, t.save_interval, t.keep_last, needed, budget,
                   resumed_step, async_save=t.async_save)  # fmt: skip

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
        if not (self.async_save and self.budget.room_for_snapshot(state.step)):
            return self._published(self._transaction(SynchronousSave, state).run(), state)
        if self._group is None:  # every rank saves at the same steps: a collective is safe
            self._group = dist.new_group(backend="gloo")
        transaction = self._transaction(
            AsynchronousSave, state, group=self._group, arena=self.budget.arena
        )
        transaction.take_snapshot()
        self._background = BackgroundSave(
            lambda serialized: self._published(transaction.complete(serialized), state)
        )
        return os.path.join(self.directory, transaction.tag)

    @property
    def in_background(self) -> bool:
        """Whether the last save is still being written in the background."""
        return self._background is not None

    def before_update(self) -> None:
        """Return once the background save, if any, no longer reads the live model and
        optimizer tensors: call before each optimizer update, which changes them, not before
        an accumulation's other micro steps, which do not (every rank at the same updates: the
        budget reserves the snapshots' memory at the second, a collective)."""
        if self._background is not None:
            self._background.serialized.wait()
        self.budget.before_update(self.async_save)

    def wait(self) -> None:
        """Return once the background save, if any, is complete; raises its CheckpointSaveError
        (on every rank: the ranks agreed on it)."""
        background, self._background = self._background, None
        if background is not None:
            background.wait()

    def _transaction(self, kind: type[Save], state: CheckpointState, **background: Any) -> Save:
        """A save of `kind` of `state` and every part's files; `background`: an asynchronous
        save's process group and host memory."""
        placed = {place: [p for p in self.parts if p.place is place] for place in Place}
        return kind(
            engine=placed[Place.DEEPSPEED][0].state_dict(),
            directory=self.directory,
            state=state,
            rank_files={
                rank_file(p.name, self.world.rank): p.state_dict() for p in placed[Place.RANK_FILE]
            },
            main_files={p.name: p.state_dict() for p in placed[Place.MAIN_FILE]},
            needed_bytes=self.needed_bytes,
            after_phase=self.after_phase,
            **background,
        )

    def _published(self, tag: str, state: CheckpointState) -> str:
        """Prune once checkpoint `tag` is published; returns its path."""
        if self.world.rank == 0:
            prune(self.directory, self.keep_last, state.run_id)
        dist.barrier(group=self._group if self.async_save else None)
        return os.path.join(self.directory, tag)
