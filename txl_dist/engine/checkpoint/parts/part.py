"""What a checkpoint part is: a name, where its state lives, and the state itself."""

from __future__ import annotations

import enum
from typing import Any, Protocol


class Place(enum.Enum):
    """Where a part's state lives in a checkpoint."""

    RECORD = "record"
    """In txl.json, under the part's name: small values in JSON types, rank 0's."""
    RANK_FILE = "rank file"
    """In `{name}_rank{r}.pt`, one per rank, loaded by a resume from every saved rank's file."""
    MAIN_FILE = "main file"
    """In the file `name`, written by rank 0 as the bytes `state_dict()` returns."""
    DEEPSPEED = "deepspeed"
    """In DeepSpeed's own files, which the engine `state_dict()` returns writes and loads."""


class CheckpointPart(Protocol):
    """One thing a checkpoint holds; registry.py lists each once, save and restore loop over
    them."""

    name: str
    """The part's name in the checkpoint (its record key or file name)."""
    place: Place
    """Where its state lives."""

    def state_dict(self) -> Any:
        """The state to save, taken at the step boundary."""

    def load_state_dict(self, state: Any) -> None:
        """Continue from a saved state: RECORD and MAIN_FILE parts get what was saved,
        RANK_FILE parts the list of every saved rank's state, the DEEPSPEED part a `Location`."""


def rank_file(name: str, rank: int) -> str:
    """The file of rank `rank`'s state of the RANK_FILE part `name`."""
    return f"{name}_rank{rank}.pt"
