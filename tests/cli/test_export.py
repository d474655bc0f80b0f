"""txl-export's input checks that need no training run (real checkpoints: tests/integration)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import processes
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.export import data_line, main
from txl_dist.engine.checkpoint.consolidate import ExportError, open_checkpoint


def test_a_directory_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ExportError, match="holds no checkpoint"):
        open_checkpoint(str(tmp_path))
    assert main([str(tmp_path), str(tmp_path / "out")]) == USAGE_ERROR
    assert "holds no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_readme_names_subword_data_subword_level():
    """Manifests call subword data word-level (both score in perplexity); the README says
    which it was."""
    data = SimpleNamespace(mix=None, dataset="jsonl", root="runs/data/own")
    ckpt = SimpleNamespace(
        config=SimpleNamespace(data=data, model=SimpleNamespace(n_token=2000)),
        point=SimpleNamespace(client=SimpleNamespace(level="word", vocab_sha256="ab" * 32)),
    )
    assert "- data: jsonl (subword level) at `runs/data/own`, the subword tokenizer" in (
        data_line(ckpt, subword=True)
    )
    assert "- data: jsonl (word level) at `runs/data/own`, a vocabulary of 2000" in (
        data_line(ckpt, subword=False)
    )


def test_help_is_not_headed_by_deepspeeds_accelerator_line():
    proc = processes.run([Path(sys.executable).parent / "txl-export", "--help"], timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: txl-export"), proc.stderr
    assert proc.stderr == "", proc.stderr  # DeepSpeed said "Setting accelerator to CPU" here
