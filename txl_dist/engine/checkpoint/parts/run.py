"""The run's place kept across resumes: its id, step, restarts and requeues."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from txl_dist.engine.checkpoint.parts.part import Place
from txl_dist.process.restarts import restart_count


@dataclass
class RunState:
    """Where the run is, kept across resumes in the checkpoint."""

    run_id: str
    """The run's id (wandb's too)."""
    step: int = 0
    """Optimizer steps done."""
    restarts: int = 0
    """Resumes before this start."""
    requeues: int = 0
    """SLURM requeues before this start."""


@dataclass
class RunPart:
    """How often the run was resumed and requeued, and by which SLURM job it was saved (its id
    and step are the record's own: the checkpoint's identity)."""

    run: RunState
    """The run's state, restored here before the Trainer gets it."""
    name: str = "run"
    place: Place = Place.RECORD

    def state_dict(self) -> dict[str, Any]:
        return {
            "restarts": self.run.restarts,
            "requeues": self.run.requeues,
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # The same SLURM job again is a requeue, unless the launcher restarted the ranks inside
        # the allocation (pretrain.sbatch's loop, torchrun): that is a restart only.
        job = os.environ.get("SLURM_JOB_ID")
        requeued = job is not None and job == state["slurm_job_id"] and restart_count() == 0
        self.run.restarts = state["restarts"] + 1
        self.run.requeues = state["requeues"] + int(requeued)
