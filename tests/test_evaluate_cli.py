"""txl-eval on a small random model: a prepared split and the same text given raw score alike."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from data_pipeline import prepare
from data_pipeline.vocab import Vocab
from txl_dist.evaluate import main
from txl_dist.model import TransformerXL, TXLConfig

WORDS = [f"w{i}" for i in range(60)]


def write_text(path, lines: int, seed: int, extra_words=()) -> None:
    rng = random.Random(seed)
    words = WORDS + list(extra_words)
    text = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A prepared text dataset whose valid split has words the vocabulary lacks."""
    root = tmp_path_factory.mktemp("corpus")
    (root / "src").mkdir()
    write_text(root / "src" / "train.txt", 300, seed=0)
    write_text(root / "src" / "valid.txt", 80, seed=1, extra_words=["novel", "unseen"])
    prepare("text", str(root / "data"), str(root / "src"), text_docs="file", progress=False)
    return root


@pytest.fixture(scope="module")
def model_dir(corpus, tmp_path_factory):
    """A random model over the corpus vocabulary, saved as txl-export writes it."""
    vocab = Vocab.load(str(corpus / "data" / "vocab.txt"))
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(vocab), n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
        cutoffs=[20], div_val=2, tgt_len=8, mem_len=8, eval_tgt_len=6, eval_mem_len=12,
        eval_same_length=True, dropout=0.0,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("model")
    TransformerXL(config).save_pretrained(out)
    shutil.copy(corpus / "data" / "vocab.txt", out / "vocab.txt")
    return out


def txl_eval(capsys, *args: str) -> dict:
    assert main([*map(str, args), "--json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("rows", [1, 3])
def test_raw_text_scores_like_its_prepared_split(capsys, corpus, model_dir, rows):
    data = txl_eval(
        capsys, "--model", model_dir, "--data", corpus / "data", "--split", "valid",
        "--batch-size", rows,
    )  # fmt: skip
    text = txl_eval(
        capsys, "--model", model_dir, "--text", corpus / "src" / "valid.txt", "--batch-size", rows
    )
    assert text["tokens"] == data["tokens"]  # every token but the first, once
    assert text["loss"] == data["loss"]
    assert text["settings"]["unknown_words"] > 0
    assert data["ppl"] == pytest.approx(torch.tensor(data["loss"]).exp().item())


def test_eval_lengths_come_from_the_config_and_can_be_overridden(capsys, corpus, model_dir):
    source = ["--model", model_dir, "--text", corpus / "src" / "valid.txt"]
    default = txl_eval(capsys, *source)["settings"]
    assert (default["tgt_len"], default["mem_len"], default["same_length"]) == (6, 12, True)
    changed = txl_eval(
        capsys, *source, "--tgt-len", 4, "--mem-len", 20, "--clamp-len", 10,
        "--same-length", "false", "--dtype", "bf16",
    )  # fmt: skip
    expected = dict(tgt_len=4, mem_len=20, clamp_len=10, same_length=False, dtype="bf16")
    assert {k: changed["settings"][k] for k in expected} == expected


def test_bad_inputs_are_clear_errors(capsys, corpus, model_dir, tmp_path):
    shutil.copytree(model_dir, tmp_path / "no_vocab")
    (tmp_path / "no_vocab" / "vocab.txt").unlink()
    text = corpus / "src" / "valid.txt"
    assert main(["--model", str(tmp_path / "no_vocab"), "--text", str(text)]) == 1
    assert "no vocab.txt" in capsys.readouterr().err

    shutil.copytree(model_dir, tmp_path / "other_vocab")
    size = len(Vocab.load(str(corpus / "data" / "vocab.txt")))
    Vocab([f"x{i}" for i in range(size)]).save(str(tmp_path / "other_vocab" / "vocab.txt"))
    data = ["--data", str(corpus / "data"), "--split", "valid"]
    assert main(["--model", str(tmp_path / "other_vocab"), *data]) == 1
    assert "another vocabulary" in capsys.readouterr().err

    assert main(["--model", str(tmp_path), *data]) == 1
    assert "config.json" in capsys.readouterr().err
