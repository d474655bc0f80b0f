"""model/pretrained.py: an export written and read back (through save_pretrained /
from_pretrained, and its own save_export / load_export), in a fresh process too, which never
imports deepspeed."""

import json
import os
import stat
import sys

import pytest
import torch

from tests import processes
from txl_dist.model import TransformerXL, TXLConfig, pretrained

LOAD_AND_SCORE = """
import sys, torch
from txl_dist.model import TransformerXL
ids = torch.load(sys.argv[1])
for export in sys.argv[2:]:
    model = TransformerXL.from_pretrained(export)
    torch.save(model(ids).log_probs, f"{export}.out.pt")
assert "deepspeed" not in sys.modules, "loading imported deepspeed"
"""
FORMATS = ("safetensors", "torch")


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> tuple:
    """One model exported in each format, both loaded and scored by one fresh process (one
    interpreter start instead of two): (model, ids, {format: its export directory})."""
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=200,
        n_layer=2,
        n_head=2,
        d_model=16,
        d_head=8,
        d_inner=32,
        d_embed=16,
        cutoffs=[50, 120],
        div_val=2,
        tie_projs=[False, True, True],
        tgt_len=5,
        mem_len=5,
    )
    model = TransformerXL(config).eval()
    root = tmp_path_factory.mktemp("exports")
    exports = {fmt: root / fmt for fmt in FORMATS}
    for fmt, directory in exports.items():
        model.save_pretrained(directory, format=fmt)
    ids = torch.randint(0, 200, (2, 5))
    torch.save(ids, root / "ids.pt")
    args = [sys.executable, "-c", LOAD_AND_SCORE, root / "ids.pt", *exports.values()]
    processes.run(args, timeout=300, check=True)
    return model, ids, exports


@pytest.mark.parametrize("fmt", FORMATS)
def test_fresh_process_loads_identical_model_without_deepspeed(scored, fmt):
    model, ids, exports = scored
    export = exports[fmt]
    torch.testing.assert_close(torch.load(f"{export}.out.pt"), model(ids).log_probs, rtol=0, atol=0)
    assert json.loads((export / "config.json").read_text())["div_val"] == 2
    weights = export / ("model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
    assert weights.stat().st_mode & 0o044 == 0o044  # readable by others, like any export


@pytest.mark.parametrize("umask", [0o002, 0o027])
def test_an_export_s_directory_and_files_follow_the_umask(tmp_path, umask):
    """Shared as the user's other files are (group-writable under 002, closed to others under
    027): not a temporary directory's 0700."""
    model = TransformerXL(TXLConfig(n_token=20, n_layer=1, n_head=2, d_model=8, d_head=4))
    before = os.umask(umask)
    try:
        model.save_pretrained(tmp_path / "model")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o777 & ~umask
    modes = {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "model").iterdir()}
    assert modes == {0o666 & ~umask}
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # nothing staged left beside it


def test_loaded_model_keeps_weights_tied(tmp_path):
    model = TransformerXL(
        TXLConfig(n_token=100, n_layer=1, n_head=2, d_model=8, d_head=4, d_inner=8)
    )
    pretrained.save_export(model, tmp_path)
    loaded = pretrained.load_export(TransformerXL, tmp_path)
    assert loaded.crit.out_layers[0].weight is loaded.word_emb.emb_layers[0].weight


def test_missing_weights_or_config_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        TransformerXL.from_pretrained(tmp_path)
    TransformerXL(
        TXLConfig(n_token=100, n_layer=1, d_model=8, n_head=2, d_head=4, d_inner=8)
    ).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        TransformerXL.from_pretrained(tmp_path)


def test_weights_of_another_config_are_refused(tmp_path):
    TransformerXL(
        TXLConfig(n_token=100, n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=8)
    ).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    with pytest.raises(ValueError, match="do not match config.json"):
        TransformerXL.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "passed,kind",
    [
        ("run", "a training run directory (train.out_dir)"),
        ("run/checkpoints", "a training checkpoints directory"),
        ("run/checkpoints/global_step5", "a training checkpoint"),
    ],
)
def test_training_files_instead_of_an_export_say_how_to_export(tmp_path, passed, kind):
    # The engine's layout: a run config beside checkpoints/ (its keys are not a model config).
    tag = tmp_path / "run" / "checkpoints" / "global_step5"
    tag.mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text(json.dumps({"model": {}, "train": {}}))
    (tag.parent / "latest").write_text("global_step5")
    (tag / "txl.json").write_text("{}")
    directory = tmp_path / passed
    with pytest.raises(FileNotFoundError) as err:
        TransformerXL.from_pretrained(directory)
    assert str(err.value) == (
        f"{directory} is {kind}, not an export: turn it into one with "
        f"`txl-export {directory} EXPORT_DIR` and pass EXPORT_DIR"
    )
