"""The training streams' position: where the next batch starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data_pipeline import BatchStream
from txl_dist.engine.checkpoint.parts.part import Place


@dataclass
class StreamPart:
    """The training streams' state_dict() (TokenStreams or a mix's MixedStreams)."""

    streams: BatchStream
    """This rank's training streams."""
    name: str = "stream"
    place: Place = Place.RECORD

    def state_dict(self) -> dict[str, Any]:
        return self.streams.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streams.load_state_dict(state)
