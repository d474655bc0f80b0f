"""txl-export's input checks that need no training run (real checkpoints: tests/integration)."""

from __future__ import annotations

import pytest

from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.export import main
from txl_dist.engine.checkpoint.consolidate import ExportError, open_checkpoint


def test_a_directory_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ExportError, match="holds no checkpoint"):
        open_checkpoint(str(tmp_path))
    assert main([str(tmp_path), str(tmp_path / "out")]) == USAGE_ERROR
    assert "holds no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
