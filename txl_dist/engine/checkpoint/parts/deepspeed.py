"""DeepSpeed's model and optimizer states, in DeepSpeed's own files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txl_dist.engine.checkpoint.parts.part import Place


@dataclass
class Location:
    """Where DeepSpeed loads its files from."""

    directory: str
    """The checkpoints directory."""
    tag: str
    """The checkpoint's tag in it, or its universal conversion's."""


@dataclass
class DeepSpeedPart:
    """The engine: the transport has it write its files into a save; a resume loads them."""

    engine: Any
    """The DeepSpeed engine."""
    name: str = "deepspeed"
    place: Place = Place.DEEPSPEED

    def state_dict(self) -> Any:
        """The engine, which writes its own files (inside the save's transaction)."""
        return self.engine

    def load_state_dict(self, state: Location) -> None:
        load_path, _ = self.engine.load_checkpoint(state.directory, tag=state.tag)
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {state.directory}/{state.tag}")
