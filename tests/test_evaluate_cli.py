"""txl-eval on a small random model: a prepared split and the same text given raw score alike."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from data_pipeline import load_manifest, manifest_url, prepare
from data_pipeline.vocab import EOS, Vocab
from txl_dist.evaluate import main
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.attention import sinusoid_encoding

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
    split_tokens = load_manifest(manifest_url(str(corpus / "data"), "valid")).tokens
    assert data["tokens"] == text["tokens"] == split_tokens - 1  # all but the first, once
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


# ---- the evaluation lengths act on the loss as the attention math says ----

PERIOD = 6  # a line of 5 words and <eos>: token t + 1 repeats token t + 1 - PERIOD
LAG = PERIOD - 1  # so the next token is the key LAG positions back


def copy_model(n_token: int) -> TransformerXL:
    """One layer whose only attention is to the key LAG back; it outputs that token.

    Content scores are zero (no query or key weights), the position score of distance d is
    200 * sum_k cos((d - LAG) f_k) over the sinusoid frequencies, so attention is one-hot on
    d = LAG when the query sees that key; the value is the key's one-hot embedding, scaled so
    that it outweighs the residual, and the tied output layer reads it back as logits.
    """
    d = 16
    config = TXLConfig(
        n_token=n_token, n_layer=1, n_head=1, d_model=d, d_head=d, d_inner=8, dropout=0.0,
        tgt_len=4, mem_len=8,
    )  # fmt: skip
    model = TransformerXL(config)
    weights = {name: torch.zeros_like(w) for name, w in model.state_dict().items()}
    eye = torch.eye(d)
    layer = "layers.0."
    weights["word_emb.emb_layers.0.weight"] = weights["crit.out_layers.0.weight"] = (
        3 * eye[:n_token]
    )
    weights[layer + "dec_attn.qkv_net.weight"] = torch.cat([0 * eye, 0 * eye, eye])
    weights[layer + "dec_attn.o_net.weight"] = 10 * eye
    weights["r_r_bias"] = eye[:1]
    weights[layer + "dec_attn.r_net.weight"][0] = 200 * sinusoid_encoding(torch.tensor([LAG]), d)[0]
    for norm in ("dec_attn.layer_norm.weight", "pos_ff.layer_norm.weight"):
        weights[layer + norm] = torch.ones(d)
    model.load_state_dict(weights)
    return model


@pytest.fixture(scope="module")
def periodic(tmp_path_factory):
    """(model dir, text file): blocks of one random line repeated, and the copy model."""
    words = WORDS[:8]
    root = tmp_path_factory.mktemp("periodic")
    vocab = Vocab([*words, EOS])
    vocab.save(str(root / "vocab.txt"))
    copy_model(len(vocab)).save_pretrained(root)
    rng = random.Random(0)
    lines = [" ".join(rng.choices(words, k=LAG)) for _ in range(6)]
    (root / "text.txt").write_text("".join(f"{line}\n" * 6 for line in lines))
    return root, root / "text.txt"


def test_same_length_and_clamp_len_change_the_loss_as_the_math_says(capsys, periodic):
    model, text = periodic
    source = ["--model", model, "--text", text, "--batch-size", 1, "--tgt-len", 4]

    def loss(*options) -> float:
        return txl_eval(capsys, *source, *options)["loss"]

    # Every query sees the key LAG back unless same_length caps it at mem_len keys (itself
    # included): with mem_len = LAG the farthest key is LAG - 1 back and the copy fails.
    full = loss("--mem-len", LAG, "--same-length", "false")
    assert loss("--mem-len", LAG, "--same-length", "true") > full + 5
    assert loss("--mem-len", LAG + 1, "--same-length", "true") == pytest.approx(full, abs=1e-4)
    # Clamping below LAG makes distance LAG look like every longer one; clamping above the
    # longest distance (memory + segment) changes nothing.
    unclamped = loss("--mem-len", 8, "--clamp-len", -1)
    assert unclamped == pytest.approx(full, abs=1e-4)
    assert loss("--mem-len", 8, "--clamp-len", 2) > unclamped + 5
    assert loss("--mem-len", 8, "--clamp-len", 12) == unclamped
