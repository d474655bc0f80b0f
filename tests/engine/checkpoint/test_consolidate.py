"""Opening a checkpoint for export: what is no checkpoint, or no readable one, says so (its
weights: tests/integration/test_export.py)."""

from __future__ import annotations

import json

import pytest

from txl_dist.engine.checkpoint import CheckpointState
from txl_dist.engine.checkpoint.consolidate import ExportError, open_checkpoint


def test_latest_naming_a_missing_tag_is_a_clear_error(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("global_step7")
    with pytest.raises(ExportError, match="global_step7"):
        open_checkpoint(str(tmp_path))


def test_a_checkpoint_with_a_broken_run_config_is_a_clear_error(tmp_path):
    tag = tmp_path / "checkpoints" / "global_step3"
    tag.mkdir(parents=True)
    (tag / "txl.json").write_text(json.dumps({"step": 3, "config": {"model": {}}}))
    with pytest.raises(ExportError, match="txl.json lacks global_rows.*not a txl-dist checkpoint"):
        open_checkpoint(str(tag))
    state = CheckpointState(
        step=3, world_size=1, global_rows=8, rows_per_rank=8,
        config={"model": {"n_layer": "four"}}, vocab_size=10, vocab_sha256="ab" * 32,
    )  # fmt: skip
    (tag / "txl.json").write_text(state.to_json())
    with pytest.raises(ExportError, match="bad run config in txl.json"):
        open_checkpoint(str(tag))
