"""txl-export's input checks that need no training run (real checkpoints: tests/integration)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from html import escape
from pathlib import Path
from types import SimpleNamespace

import pytest

from data_pipeline import Vocab
from tests import processes
from tests.conftest import REPO_ROOT
from tests.data_pipeline.test_received import without_blocking
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.export import card_text, data_line, main, shared_text
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
    assert "- data: jsonl (subword level) at runs/data/own, the subword tokenizer" in (
        data_line(ckpt, subword=True)
    )
    assert "- data: jsonl (word level) at runs/data/own, a vocabulary of 2000" in (
        data_line(ckpt, subword=False)
    )


HOSTILE = {
    "run_id": '<script>alert(1)</script><img src=x onerror="alert(2)">',
    "init_from": "[weights](javascript:alert(3)) <javascript:alert(4)> `x` **y**\n# Owned",
}
"""What a received checkpoint's txl.json may say where the README quotes it."""


def assert_renders_as_text(readme: str) -> None:
    """The README, rendered as a hub renders a model card (raw HTML passed through), has no
    tag, link, emphasis or heading of txl.json's: each HOSTILE value shows as its text (a line
    break as \\n)."""
    html = pytest.importorskip("markdown_it").MarkdownIt("commonmark").render(readme)
    for made in ("<script", "<img", "<a ", "href=", "<code>x", "<strong>y", "<h1>Owned"):
        assert made not in html
    for value in HOSTILE.values():
        shown = escape(value.replace("\n", "\\n"), quote=False).replace('"', "&quot;")
        assert shown in html


def test_text_from_a_received_checkpoint_reads_as_text_in_the_readme():
    lines = [f"- {key}: {card_text(value)} (train.{key})" for key, value in HOSTILE.items()]
    assert_renders_as_text("\n".join(lines) + "\n")
    assert all("\n" not in card_text(v) + shared_text(v) for v in HOSTILE.values())


def test_the_readme_shares_no_local_path_and_no_secret():
    note = "checkpoint /home/me/runs/tiny/checkpoints/global_step5 (run r1, step 5)"
    assert card_text(note) == "checkpoint \u2026/global\\_step5 \\(run r1, step 5\\)"
    assert shared_text("file:///srv/data/wt103/") == "\u2026/wt103"
    assert shared_text("~/corpora/own") == "\u2026/own"
    assert shared_text("runs/data/own") == "runs/data/own"  # relative: the project's own
    assert shared_text("s3://bucket/data/own?token=abc") == "s3://bucket/data/own?token=***"


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
