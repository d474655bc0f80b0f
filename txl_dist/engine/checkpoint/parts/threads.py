"""The compute threads the run's ranks used, reused on resume for the same losses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from txl_dist.engine.checkpoint.parts.part import Place
from txl_dist.process.threads import reuse_threads


@dataclass
class ThreadsPart:
    """txl.json's `threads`: the compute threads per rank the run trained with (chosen from the
    machine's load at its start), reused on resume: float reductions can differ with the
    thread count, so a resumed run would not repeat the uninterrupted run's losses."""

    name: str = "threads"
    place: Place = Place.RECORD

    def state_dict(self) -> dict[str, Any]:
        return {"per_rank": torch.get_num_threads()}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:  # a checkpoint saved before this part keeps the load's choice
            reuse_threads(state.get("per_rank"))
