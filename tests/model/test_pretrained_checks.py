"""Edited or mixed export directories fail fast on load; saves replace a directory whole."""

import argparse
import json
import time

import pytest
import torch

from data_pipeline.shards.errors import DataError
from data_pipeline.vocab import Vocab
from txl_dist.cli import USAGE_ERROR, evaluate, generate
from txl_dist.model import TransformerXL, TXLConfig


def small_model(seed=0) -> TransformerXL:
    torch.manual_seed(seed)
    return TransformerXL(
        TXLConfig(n_token=100, n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=8)
    ).eval()


def edit_config(directory, **changes):
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


def test_a_vocabulary_of_another_size_is_refused(tmp_path):
    small_model().save_pretrained(tmp_path)
    lines = [f"w{i}\t1" for i in range(300)]  # 200 more entries than n_token
    (tmp_path / "vocab.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="300 entries but config.json has n_token 100"):
        TransformerXL.from_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(lines[:100]) + "\n")
    assert TransformerXL.from_pretrained(tmp_path).config.n_token == 100


def test_tokens_holding_a_separator_or_a_no_break_space_count_as_vocab_load_reads_them(tmp_path):
    small_model().save_pretrained(tmp_path)
    tokens = ["a\x1cb", "\xa0", *(f"w{i}" for i in range(98))]  # str.splitlines/split cut these
    Vocab(tokens, [1] * 100).save(str(tmp_path / "vocab.txt"))
    assert TransformerXL.from_pretrained(tmp_path).config.n_token == 100
    assert Vocab.load(str(tmp_path / "vocab.txt")).tokens == tokens
    (tmp_path / "vocab.txt").write_text("a\t1\nb\tmany\n")
    with pytest.raises(DataError, match="entry 'b' has count 'many', not a number"):
        Vocab.load(str(tmp_path / "vocab.txt"))


def test_an_existing_file_is_not_replaced_by_an_export(tmp_path):
    out = tmp_path / "notes.txt"
    out.write_text("precious")
    with pytest.raises(FileExistsError, match="notes.txt exists and is a file; choose"):
        small_model().save_pretrained(out)
    assert out.read_text() == "precious"


def test_a_safetensors_header_with_overlapping_offsets_is_one_line(tmp_path):
    small_model().save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    first, second = (k for k in header if k.startswith("layers.") and k.endswith(".o_net.weight"))
    header[second]["data_offsets"] = header[first]["data_offsets"]  # the same bytes twice
    edited = json.dumps(header, separators=(",", ":")).encode().ljust(size)
    assert len(edited) == size
    path.write_bytes(data[:8] + edited + data[8 + size :])
    with pytest.raises(ValueError, match="is not a valid safetensors file") as err:
        TransformerXL.from_pretrained(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("n_layer", [500, 50_000])
def test_an_edited_layer_count_fails_in_under_a_second(tmp_path, n_layer):
    small_model().save_pretrained(tmp_path)
    edit_config(tmp_path, n_layer=n_layer)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=f"2 layers, n_layer {n_layer}"):
        TransformerXL.from_pretrained(tmp_path)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("fmt", ["safetensors", "torch"])
def test_shapes_of_another_config_are_named(tmp_path, fmt):
    small_model().save_pretrained(tmp_path, format=fmt)
    edit_config(tmp_path, d_inner=16)
    with pytest.raises(ValueError, match=r"layers.0.pos_ff.CoreNet.0.weight \(8, 8\) vs \(16, 8\)"):
        TransformerXL.from_pretrained(tmp_path)


def test_saving_over_an_export_of_the_other_format_leaves_only_the_new_weights(tmp_path):
    old, new = small_model(seed=1), small_model(seed=2)
    old.save_pretrained(tmp_path / "out", format="torch")
    new.save_pretrained(tmp_path / "out", format="safetensors")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    loaded = TransformerXL.from_pretrained(tmp_path / "out")
    torch.testing.assert_close(loaded.state_dict(), new.state_dict(), rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left


def test_both_weight_files_in_one_directory_is_an_error(tmp_path):
    model = small_model()
    model.save_pretrained(tmp_path / "a", format="torch")
    model.save_pretrained(tmp_path / "b", format="safetensors")
    (tmp_path / "b" / "pytorch_model.bin").write_bytes(
        (tmp_path / "a" / "pytorch_model.bin").read_bytes()
    )
    with pytest.raises(
        FileNotFoundError, match="holds both model.safetensors and pytorch_model.bin"
    ):
        TransformerXL.from_pretrained(tmp_path / "b")


def test_a_failed_save_leaves_the_earlier_export_and_no_temporary(tmp_path):
    old = small_model(seed=1)
    old.save_pretrained(tmp_path / "out")

    def crash(directory):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        small_model(seed=2).save_pretrained(tmp_path / "out", format="torch", write_extra=crash)
    loaded = TransformerXL.from_pretrained(tmp_path / "out")
    torch.testing.assert_close(loaded.state_dict(), old.state_dict(), rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_directory_that_is_not_an_export_is_never_replaced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not an export"):
        small_model().save_pretrained(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", ["txl-generate", "txl-eval"])
def test_a_pickle_weights_only_refuses_is_one_line_without_torchs_advice(tmp_path, capsys, command):
    small_model().save_pretrained(tmp_path / "export", format="torch")
    Vocab([f"w{i}" for i in range(100)], [1] * 100).save(str(tmp_path / "export" / "vocab.txt"))
    weights = tmp_path / "export" / "pytorch_model.bin"
    state = torch.load(weights, weights_only=True)
    torch.save({**state, "note": argparse.Namespace(run="elsewhere")}, weights)
    (tmp_path / "text.txt").write_text("w1 w2 w3\n" * 4)
    model = ["--model", str(tmp_path / "export")]
    if command == "txl-generate":
        assert generate.main([*model, "--prompt", "w1", "--max-tokens", "2"]) == USAGE_ERROR
    else:
        assert evaluate.main([*model, "--text", str(tmp_path / "text.txt"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"{command}: error: {weights}: refused, its pickle holds more than tensors (Unsupported "
        "global: GLOBAL argparse.Namespace): export the checkpoint again\n"
    )
    assert "Re-running" not in err and "set to `False`" not in err
