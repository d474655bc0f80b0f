"""The training data's subword tokenizer, carried by every checkpoint as tokenizer.json."""

from __future__ import annotations

from dataclasses import dataclass

from data_pipeline import TOKENIZER_FILE, Subword
from txl_dist.engine.checkpoint.parts.part import Place


@dataclass
class TokenizerPart:
    """tokenizer.json, for an export to turn text into ids as the data was prepared; a resume
    has it checked against the record's vocab_sha256 before anything loads (integrity.py)."""

    tokenizer: Subword
    """The training data's tokenizer."""
    name: str = TOKENIZER_FILE
    place: Place = Place.MAIN_FILE

    def state_dict(self) -> bytes:
        return self.tokenizer.json_text.encode("utf-8")

    def load_state_dict(self, state: bytes) -> None:
        """Nothing to load: the run reads its tokenizer from its data, which the record's
        vocab_sha256 ties to this one."""
