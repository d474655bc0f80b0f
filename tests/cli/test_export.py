"""txl-export's input checks that need no training run (real checkpoints: tests/integration)."""

from __future__ import annotations

import json

import pytest

from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.export import ExportError, main, open_checkpoint
from txl_dist.engine.checkpoint import CheckpointState


def test_a_directory_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ExportError, match="holds no checkpoint"):
        open_checkpoint(str(tmp_path))
    assert main([str(tmp_path), str(tmp_path / "out")]) == USAGE_ERROR
    assert "holds no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


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
    state = CheckpointState(3, {}, 1, 8, 8, {"model": {"n_layer": "four"}}, 10, "ab" * 32)
    (tag / "txl.json").write_text(state.to_json())
    with pytest.raises(ExportError, match="bad run config in txl.json"):
        open_checkpoint(str(tag))
