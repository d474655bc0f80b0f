"""Encoding: each unit's documents as ids of the job's vocabulary, written into shards of its
own, then its record; a unit whose record names this vocabulary and whose shards are all there
is done."""

from __future__ import annotations

import logging
from dataclasses import asdict

from data_pipeline.prepare.pieces import Vocabulary, encode_piece
from data_pipeline.prepare.plan import Plan
from data_pipeline.prepare.units import Unit
from data_pipeline.shards.writer import ShardSink

log = logging.getLogger(__name__)


class Encoder:
    """Writes the units of a job's plan into shards, and tells which are done."""

    def __init__(self, plan: Plan):
        self.plan = plan

    def encoded(self, unit: Unit, voc: Vocabulary) -> dict | None:
        """The unit's record if its shards were written with this vocabulary and are all there."""
        record = self.plan.records.read("unit", unit, self.plan.fingerprints[unit.split])
        if record is None or record["vocab_sha256"] != voc.sha256:
            return None
        shards = [(shard["url"], shard["bytes"]) for shard in record["shards"]]
        return record if self.shards_present(unit.split, shards) else None

    def shards_present(self, split: str, shards: list[tuple[str, int]]) -> bool:
        """Whether every (file name, bytes) shard of `split` is written whole."""
        fs = self.plan.fs
        for url, size in shards:
            path = f"{self.plan.out_path}/{split}/{url}"
            if not fs.exists(path) or fs.size(path) != size:
                return False
        return True

    def encode(self, units: list[Unit], voc: Vocabulary) -> None:
        """Write each unit's shards, then its record."""
        plan, settings = self.plan, self.plan.settings
        for unit, results in plan.unit_results(encode_piece, units, voc):
            split_dir = f"{plan.out_path}/{unit.split}"
            plan.fs.makedirs(split_dir, exist_ok=True)
            sink = ShardSink(
                split_dir, unit.name, settings.sample_size, settings.shard_size, plan.fs
            )
            oov_tokens = bad_records = 0
            for piece in results:
                sink.add(piece.ids, piece.doc_lengths)
                oov_tokens += piece.oov_tokens
                bad_records += piece.bad_records
            if bad_records:
                log.warning("%s: left out %d malformed records", unit.name, bad_records)
            shards = [asdict(s) for s in sink.close()]
            record = {"fingerprint": plan.fingerprints[unit.split], "vocab_sha256": voc.sha256}
            plan.records.write("unit", unit, {**record, "oov_tokens": oov_tokens, "shards": shards})
