"""txl-export's input checks that need no training run (real checkpoints: tests/integration)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from data_pipeline import Vocab
from tests import processes
from tests.conftest import REPO_ROOT
from tests.data_pipeline.test_received import without_blocking
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.export import main
from txl_dist.engine.checkpoint.consolidate import ExportError, open_checkpoint


def test_a_directory_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ExportError, match="holds no checkpoint"):
        open_checkpoint(str(tmp_path))
    assert main([str(tmp_path), str(tmp_path / "out")]) == USAGE_ERROR
    assert "holds no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


FIXTURE = REPO_ROOT / "tests" / "fixtures" / "checkpoint_v1" / "global_step4"  # 2 ranks, ZeRO 1


def received(tmp_path: Path, **model: object) -> tuple[Path, Path]:
    """A copy of a real checkpoint as someone may send it: its txl.json rewritten (the model
    section's `model` values, its vocab_sha256 that of a vocab.txt written beside it)."""
    tag = Path(shutil.copytree(FIXTURE, tmp_path / "global_step4"))
    record = json.loads((tag / "txl.json").read_text())
    vocab = Vocab([f"w{i}" for i in range(record["config"]["model"]["n_token"])])
    vocab.save(str(tmp_path / "vocab.txt"))
    record["vocab_sha256"] = vocab.sha256
    record["config"]["model"].update(model)
    (tag / "txl.json").write_text(json.dumps(record))
    return tag, tmp_path / "vocab.txt"


def test_a_received_checkpoint_of_the_config_it_says_exports(tmp_path, capsys):
    tag, vocab = received(tmp_path)
    assert main([str(tag), str(tmp_path / "out"), "--vocab", str(vocab)]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file()


@pytest.mark.parametrize("n_layer", [10**7, 3, 1])
def test_n_layer_is_checked_against_the_weights_before_any_layer_is_built(
    tmp_path, capsys, n_layer
):
    """txl.json's n_layer 10**7 built layers for minutes, memory growing, before comparing."""
    tag, vocab = received(tmp_path, n_layer=n_layer)
    assert main([str(tag), str(tmp_path / "out"), "--vocab", str(vocab)]) == USAGE_ERROR
    err = capsys.readouterr().err  # after zero_to_fp32's progress lines, the refusal's one
    assert "Traceback" not in err and err.count("txl-export") == 1
    assert err.splitlines()[-1] == (
        f"txl-export: error: {tag}: the weights hold 2 layers, txl.json's model section says "
        f"n_layer {n_layer}: the checkpoint does not match its config"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "plant, refusal",
    [
        ("link to /", "zero: refused, a link in a checkpoint, which txl-dist never writes"),
        ("fifo", "extra.pt: refused, a special file (FIFO, device, socket) in a checkpoint"),
        ("sparse tokenizer", "tokenizer.json holds more than TXL_MAX_TOKENIZER_BYTES=134217728"),
        ("fifo tokenizer", "tokenizer.json is not a regular file"),
        ("world_size", "txl.json records world_size 1000000000, its files are those of 2 ranks"),
        ("fifo txl.json", "txl.json is not a regular file"),
    ],
)
def test_a_received_checkpoints_files_and_numbers_are_checked_before_use(
    tmp_path, capsys, plant, refusal
):
    """A link to / made the pickle scan walk the whole file system; a FIFO blocked open(); a
    5 GB sparse tokenizer.json was read whole; world_size 10**9 built 10**9 paths."""
    tag, vocab = received(tmp_path)
    planted = {
        "link to /": "zero", "fifo": "extra.pt", "sparse tokenizer": "tokenizer.json",
        "fifo tokenizer": "tokenizer.json", "world_size": "txl.json", "fifo txl.json": "txl.json",
    }[plant]  # fmt: skip
    if plant == "link to /":
        os.symlink("/", tag / "zero")
    elif plant == "sparse tokenizer":
        with open(tag / "tokenizer.json", "wb") as f:
            f.truncate(5 << 30)
    elif plant == "world_size":
        record = json.loads((tag / "txl.json").read_text())
        (tag / "txl.json").write_text(json.dumps({**record, "world_size": 10**9}))
    else:
        (tag / planted).unlink(missing_ok=True)
        os.mkfifo(tag / planted)
    args = [str(tag), str(tmp_path / "out"), "--vocab", str(vocab)]
    assert without_blocking(tag / planted, lambda: main(args)) == USAGE_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("txl-export: error: ") and refusal in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["link", "fifo", "sparse", "rows"])
def test_a_received_runs_metrics_are_read_a_row_at_a_time_as_a_file_of_its_own(
    tmp_path, capsys, kind
):
    """The README quotes the run's evaluation rows of the step from metrics.jsonl, which a
    received run directory may hold as a link to /dev/zero, a FIFO or a 5 GB sparse file."""
    tag, vocab = received(tmp_path / "run" / "checkpoints")
    metrics = tmp_path / "run" / "metrics.jsonl"
    if kind == "link":
        metrics.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(metrics)
    elif kind == "sparse":
        with open(metrics, "wb") as f:
            f.truncate(5 << 30)
    else:
        rows = [{"step": 4, "split": "valid", "loss": 7.1, "ppl": 1212.0}, {"step": 3}]
        metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = [str(tag), str(tmp_path / "out"), "--vocab", str(vocab)]
    code = without_blocking(metrics, lambda: main(args))
    if kind == "rows":
        assert code == 0 and "1212" in (tmp_path / "out" / "README.md").read_text()
        return
    assert code == USAGE_ERROR
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"txl-export: error: {metrics} ")
    assert not (tmp_path / "out").exists()


def test_help_is_not_headed_by_deepspeeds_accelerator_line():
    proc = processes.run([Path(sys.executable).parent / "txl-export", "--help"], timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: txl-export"), proc.stderr
    assert proc.stderr == "", proc.stderr  # DeepSpeed said "Setting accelerator to CPU" here
