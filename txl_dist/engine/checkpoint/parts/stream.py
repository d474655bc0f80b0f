"""The training streams' position: where the next batch starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data_pipeline.streams import TokenStreams
from txl_dist.engine.checkpoint.parts.part import Place


@dataclass
class StreamPart:
    """TokenStreams.state_dict() of the training streams (a mix's too)."""

    streams: TokenStreams
    """This rank's training streams."""
    name: str = "stream"
    place: Place = Place.RECORD

    def state_dict(self) -> dict[str, Any]:
        return self.streams.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streams.load_state_dict(state)
