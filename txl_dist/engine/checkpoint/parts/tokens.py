"""The training tokens each rank has seen, counted across resumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txl_dist.engine.checkpoint.parts.part import Place
from txl_dist.engine.checkpoint.parts.run import RunState


@dataclass
class SeenTokens:
    """This rank's count, which the Trainer adds each batch to."""

    tokens: int = 0
    """Training tokens (inputs) this rank has taken from its streams, since the run began."""


@dataclass
class TokensPart:
    """tokens_rank{r}.pt: rank r's count of the training tokens it has seen."""

    seen: SeenTokens
    """This rank's count."""
    rank: int
    """This rank."""
    world_size: int
    """Ranks of this run."""
    per_step: int
    """Tokens a rank takes each step (rows per rank x tgt_len): a checkpoint saved before this
    part existed has seen the resumed step's worth."""
    run: RunState
    """The run's state, whose step is restored before the parts."""
    name: str = "tokens"
    place: Place = Place.RANK_FILE

    def state_dict(self) -> dict[str, Any]:
        return {"tokens": self.seen.tokens}

    def load_state_dict(self, saved: list[dict[str, Any]] | None) -> None:
        if saved is None:
            self.seen.tokens = self.run.step * self.per_step
        elif len(saved) == self.world_size:
            self.seen.tokens = saved[self.rank]["tokens"]
        else:  # another world size: the rows, and what they saw, are spread over the new ranks
            self.seen.tokens = sum(state["tokens"] for state in saved) // self.world_size
