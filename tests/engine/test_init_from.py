"""train.init_from: an export or checkpoint opened and checked before any process group, and its
weights copied into the run's freshly built model."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import torch

from data_pipeline.cli import main as prepare_main
from tests.cli.test_evaluate import planted
from tests.conftest import REPO_ROOT
from tests.data_pipeline.test_received import without_blocking
from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import build_model
from txl_dist.engine.init_from import (
    ARCHITECTURE_FIELDS,
    check_source,
    checked_source,
    copy_weights,
    open_source,
    source_model,
)
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.schema import ConfigError

TEXT = "the cat sat on the mat\nand the dog sat on the log\n" * 40

# The tiny config made smaller: no clusters, so a vocabulary of a few words fits.
MODEL = [
    "model.cutoffs=[]",
    "model.tie_projs=[false]",
    "model.div_val=1",
    "model.n_layer=2",
    "model.d_model=16",
    "model.d_embed=16",
    "model.d_head=4",
    "model.d_inner=32",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A few words of text prepared by txl-prepare (its own vocabulary)."""
    root = tmp_path_factory.mktemp("data")
    (root / "src").mkdir()
    for split in ("train", "valid"):
        (root / "src" / f"{split}.txt").write_text(TEXT)
    args = ["--dataset", "text", "--source", str(root / "src"), "--out", str(root / "out")]
    assert prepare_main([*args, "--no-progress"]) == 0
    return root / "out"


def run_config(data: Path, *overrides: str):
    settings = [f"data.path={data}", "data.test_split=null", *MODEL, *overrides]
    return load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), settings)


def make_export(directory: Path, config: TXLConfig, vocab: Path | None, seed: int = 5) -> Path:
    """An export of a model of `config` with weights from `seed` and the vocabulary `vocab`."""
    torch.manual_seed(seed)
    model = TransformerXL(config)
    write = (lambda tmp: shutil.copy(vocab, Path(tmp) / "vocab.txt")) if vocab else None
    model.save_pretrained(directory, write_extra=write)
    return directory


def test_an_export_of_the_same_architecture_and_vocabulary_passes_whatever_its_lengths(
    data, tmp_path
):
    config = run_config(data, f"train.init_from={tmp_path / 'export'}")
    # Lengths, dropout and init are training choices: a continued run may change them.
    source_config = TXLConfig(
        **{
            **config.model.to_dict(),
            "tgt_len": 16,
            "mem_len": 0,
            "dropout": 0.3,
            "eval_mem_len": 7,
            "init_std": 0.5,
        }
    )
    make_export(tmp_path / "export", source_config, data / "vocab.txt")
    source = checked_source(config)
    assert source.kind == "export" and source.describe() == f"export {tmp_path / 'export'}"
    assert source.model == source_config


def test_a_different_architecture_is_refused_in_one_line_naming_both(data, tmp_path):
    config = run_config(data)
    make_export(
        tmp_path / "export",
        TXLConfig(**{**config.model.to_dict(), "d_inner": 64, "n_layer": 3}),
        data / "vocab.txt",
    )
    with pytest.raises(ConfigError) as err:
        check_source(open_source(str(tmp_path / "export")), config)
    message = str(err.value)
    assert "\n" not in message
    assert "another architecture" in message and "n_layer 3 vs 2; d_inner 64 vs 32" in message
    assert "tgt_len" not in message


def test_another_vocabulary_is_refused_in_one_line_naming_both_hashes(data, tmp_path):
    config = run_config(data)
    lines = (data / "vocab.txt").read_text().splitlines(keepends=True)
    (tmp_path / "vocab.txt").write_text("".join([lines[1], lines[0], *lines[2:]]))
    make_export(tmp_path / "export", config.model, tmp_path / "vocab.txt")
    source = open_source(str(tmp_path / "export"))
    with pytest.raises(ConfigError) as err:
        check_source(source, config)
    message = str(err.value)
    assert "\n" not in message
    assert f"vocabulary sha256 {source.vocab_sha256[:12]}, this run's data" in message
    assert "txl-prepare --vocab FILE" in message


def test_a_directory_that_is_neither_export_nor_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="neither an export .* nor a checkpoint"):
        open_source(str(tmp_path))


def test_a_remote_url_is_refused_and_a_file_url_read(data, tmp_path):
    with pytest.raises(
        ConfigError, match=r"is remote \(s3://\); init_from reads a local path only"
    ):
        open_source("s3://bucket/export")
    make_export(tmp_path / "export", run_config(data).model, data / "vocab.txt")
    source = open_source(f"file://{tmp_path / 'export'}")
    assert source.kind == "export"
    assert isinstance(source_model(source), TransformerXL)


def test_a_hugging_face_export_is_refused_saying_which_format_to_use(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "txl_dist", "auto_map": {}, "txl": {}}')
    with pytest.raises(ConfigError, match=r"^train.init_from=.* is a Hugging Face export"):
        open_source(str(tmp_path))


def test_an_export_without_vocabulary_is_refused(data, tmp_path):
    make_export(tmp_path / "export", run_config(data).model, vocab=None)
    with pytest.raises(ConfigError, match="no vocab.txt or tokenizer.json"):
        open_source(str(tmp_path / "export"))


def test_the_model_is_built_with_the_exports_weights_not_the_seeds(data, tmp_path):
    config = run_config(data, "train.seed=3")
    make_export(tmp_path / "export", config.model, data / "vocab.txt", seed=9)
    source = open_source(str(tmp_path / "export"))
    model = build_model(config, {}, source)
    seeded = build_model(config, {})
    expected = TransformerXL.from_pretrained(tmp_path / "export")
    names = dict(model.named_parameters())
    for name, weight in expected.named_parameters():
        assert torch.equal(names[name], weight), name
        assert not torch.equal(dict(seeded.named_parameters())[name], weight) or weight.std() == 0
    # ties survive: the output layer is the embedding
    assert model.crit.out_layers[0].weight is model.word_emb.emb_layers[0].weight


def test_copy_weights_gathers_each_modules_parameters_once(data, tmp_path):
    config = run_config(data)
    make_export(tmp_path / "export", config.model, data / "vocab.txt")
    source = source_model(open_source(str(tmp_path / "export")))
    model = TransformerXL(config.model, init_weights=False)
    gathers = []

    def gathered(params):
        gathers.append(len(params))
        return torch.enable_grad()  # any context manager

    copy_weights(model, source, gathered)
    assert sum(gathers) == len(list(model.parameters()))  # tied parameters once
    assert all(gathers)
    # A ZeRO-3 rank other than the gathers' modifier: the same gathers, nothing written.
    before, other_gathers = copy.deepcopy(model.state_dict()), gathers.copy()
    gathers.clear()
    torch.nn.init.zeros_(model.r_w_bias)
    before["r_w_bias"] = model.r_w_bias.detach().clone()
    copy_weights(model, None, gathered)
    assert gathers == other_gathers
    for name, weight in model.state_dict().items():
        assert torch.equal(weight, before[name]), name


def test_the_architecture_fields_are_the_ones_that_shape_the_parameters():
    lengths = {"tgt_len", "mem_len", "clamp_len", "same_length", "dropout", "dropatt"}
    assert not lengths & set(ARCHITECTURE_FIELDS)
    assert {"n_token", "n_layer", "d_model", "cutoffs", "tie_weight"} <= set(ARCHITECTURE_FIELDS)


def test_the_check_and_the_load_read_the_same_export_when_its_link_is_swapped(data, tmp_path):
    """A link checked against the run's vocabulary, then pointed at another export before the
    weights are loaded: the checked export's weights are loaded all the same."""
    config = run_config(data, f"train.init_from={tmp_path / 'source'}")
    checked = make_export(tmp_path / "checked", config.model, data / "vocab.txt", seed=5)
    lines = (data / "vocab.txt").read_text().splitlines(keepends=True)
    (tmp_path / "vocab.txt").write_text("".join([lines[1], lines[0], *lines[2:]]))
    other = make_export(tmp_path / "other", config.model, tmp_path / "vocab.txt", seed=9)
    (tmp_path / "source").symlink_to(checked)
    source = checked_source(config)
    (tmp_path / "source").unlink()
    (tmp_path / "source").symlink_to(other)  # a source the vocabulary check refuses
    with pytest.raises(ConfigError, match="was trained with vocabulary sha256"):
        checked_source(config)
    loaded = dict(source_model(source).named_parameters())
    for name, weight in TransformerXL.from_pretrained(checked).named_parameters():
        assert torch.equal(loaded[name], weight), name
    assert source.describe() == f"export {tmp_path / 'source'}"


@pytest.mark.parametrize(
    "name, kind, refusal",
    [
        ("config.json", "link", "config.json is a link: a model config (config.json) is read"),
        ("config.json", "fifo", "config.json is not a regular file (a FIFO, device or directory)"),
        ("vocab.txt", "link", "vocab.txt is a link: a vocabulary file (vocab.txt) is read only"),
        ("vocab.txt", "elsewhere", "vocab.txt is a link"),
        ("vocab.txt", "fifo", "vocab.txt is not a regular file"),
        ("vocab.txt", "sparse", "vocab.txt holds more than TXL_MAX_VOCAB_BYTES=268435456 bytes"),
    ],
)
def test_an_exports_file_that_is_no_regular_file_of_its_own_is_refused_in_one_line(
    data, tmp_path, name, kind, refusal
):
    config = run_config(data, f"train.init_from={tmp_path / 'export'}")
    export = make_export(tmp_path / "export", config.model, data / "vocab.txt")
    planted(export, name, kind)
    with pytest.raises(ConfigError) as err:
        without_blocking(export / name, lambda: checked_source(config))
    message = str(err.value)
    assert "\n" not in message and "/proc/" not in message
    assert message.startswith(f"train.init_from={export}: not a readable export: {export}/")
    assert refusal in message
