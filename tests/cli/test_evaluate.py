"""txl-eval on a small random model: a prepared split and the same text given raw score alike;
sweeps match plain runs, and a group sweep's RECL matches its models' per-token losses."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest
import torch

from data_pipeline import load_manifest, manifest_url, prepare
from data_pipeline.cli import main as prepare_main
from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.shards.errors import DataError
from data_pipeline.streams.geometry import IGNORE_INDEX
from data_pipeline.streams.text_batches import TextBatches
from data_pipeline.vocab import EOS, Vocab
from tests.data_pipeline.paper_inputs import write_zip
from tests.data_pipeline.test_received import without_blocking
from tests.exports.test_loading import DOCS as SUBWORD_DOCS
from tests.exports.test_loading import bpe, export
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.evaluate import main, render
from txl_dist.cli.evaluate_data import EvalReport, check_data_vocab
from txl_dist.evaluation.context import SweepRow, effective_context, read_csv, recl
from txl_dist.evaluation.sweep import SweepResult
from txl_dist.exports.loading import DATA_FILE, EVAL_ROWS
from txl_dist.exports.text import text_ids
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
    assert data["level"] == text["level"] == "word" and data["bpc"] is None
    assert f"ppl {text['ppl']:.3f} per word  (" in render(EvalReport(**text), as_json=False)


def test_a_subword_export_is_scored_per_subword_token(capsys, tmp_path):
    # A BPE export; its text as a file, and as a JSONL corpus prepared with its tokenizer.
    model_dir = export(tmp_path / "export", bpe(300, SUBWORD_DOCS), 300)
    (tmp_path / "text.txt").write_text("".join(SUBWORD_DOCS[:40]))
    (tmp_path / "src").mkdir()
    records = "".join(json.dumps({"text": d}) + "\n" for d in SUBWORD_DOCS[:40])
    (tmp_path / "src" / "valid.jsonl").write_text(records)
    tokenizer = str(tmp_path / "export" / TOKENIZER_FILE)
    argv = ["--dataset", "jsonl", "--source", str(tmp_path / "src"), "--tokenizer", tokenizer]
    assert prepare_main([*argv, "--out", str(tmp_path / "data"), "--no-progress"]) == 0
    capsys.readouterr()  # txl-prepare's summary
    for source in (
        ["--text", tmp_path / "text.txt"],
        ["--data", tmp_path / "data", "--split", "valid"],
    ):
        args = ["--model", model_dir, *source, "--batch-size", "1"]
        report = txl_eval(capsys, *args)
        assert (report["level"], report["bpc"]) == ("subword", None), source
        assert main([*map(str, args), "--no-progress"]) == 0
        shown = capsys.readouterr().out
        assert f"ppl {report['ppl']:.3f} per subword token  ({report['tokens']} tokens" in shown


def test_char_level_data_is_scored_in_bits_per_character(capsys, tmp_path):
    # A text8-shaped corpus (txl-prepare marks its manifests level "char") and a random
    # full-softmax model over its 27 characters, exported with the level in data.json.
    rng = random.Random(0)
    text = " ".join("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=5)) for _ in range(900))
    archive = write_zip(tmp_path / "text8.zip", "text8", text.encode())
    argv = ["--dataset", "text8", "--source", str(archive), "--out", str(tmp_path / "data")]
    assert prepare_main([*argv, "--test-chars", "600", "--no-progress"]) == 0
    capsys.readouterr()  # txl-prepare's summary
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=27, n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, tgt_len=8, mem_len=8
    )
    model_dir = tmp_path / "model"
    TransformerXL(config).save_pretrained(model_dir)
    shutil.copy(tmp_path / "data" / "vocab.txt", model_dir / "vocab.txt")
    (model_dir / "data.json").write_text(json.dumps({"dataset": "text8", "level": "char"}))

    data = ["--model", model_dir, "--data", tmp_path / "data", "--split", "valid"]
    report = txl_eval(capsys, *data)
    assert (report["level"], report["ppl"]) == ("char", None)
    assert report["bpc"] == pytest.approx(report["loss"] / np.log(2))
    table = render(EvalReport(**report), as_json=False)
    assert f"bpc {report['bpc']:.4f}" in table and "ppl" not in table
    sweep = txl_eval(capsys, *data, "--sweep-mem-len", "0,8", "--out", tmp_path / "sweep.csv")
    assert [r["bpc"] for r in sweep["rows"]] == pytest.approx(
        [r["loss"] / np.log(2) for r in sweep["rows"]]
    )
    assert {r["ppl"] for r in sweep["rows"]} == {None}
    assert read_csv(str(tmp_path / "sweep.csv")) == [SweepRow(**r) for r in sweep["rows"]]
    shown = render(SweepResult([SweepRow(**r) for r in sweep["rows"]], 0.01, {}, {}), False)
    assert shown.splitlines()[0].split()[-2:] == ["bpc", "tokens"] and "ppl" not in shown
    (tmp_path / "words.txt").write_text("a few words\n")
    assert main(["--model", str(model_dir), "--text", str(tmp_path / "words.txt")]) == USAGE_ERROR
    assert "character-level model" in capsys.readouterr().err


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


def test_rows_and_dtype_default_to_the_training_runs_evaluation(capsys, corpus, model_dir):
    """txl-export records the run's evaluation rows and precision in data.json: txl-eval scores
    with them unless told otherwise; without the record, the reference's 10 rows in fp32."""
    source = ["--model", model_dir, "--text", corpus / "src" / "valid.txt"]
    plain = txl_eval(capsys, *source)["settings"]
    assert (plain["batch_size"], plain["dtype"]) == (EVAL_ROWS, "fp32")
    data = model_dir / DATA_FILE
    try:
        data.write_text(json.dumps({"level": "word", "evaluation": {"rows": 4, "dtype": "bf16"}}))
        recorded = txl_eval(capsys, *source)["settings"]
        assert (recorded["batch_size"], recorded["dtype"]) == (4, "bf16")
        told = txl_eval(capsys, *source, "--batch-size", 3, "--dtype", "fp32")["settings"]
        assert (told["batch_size"], told["dtype"]) == (3, "fp32")
        data.write_text(json.dumps({"evaluation": {"rows": 0, "dtype": "bf16"}}))
        assert main([*map(str, source), "--no-progress"]) == USAGE_ERROR
        assert "data.json: evaluation" in capsys.readouterr().err
    finally:
        data.unlink()


def test_bad_inputs_are_clear_errors(capsys, corpus, model_dir, tmp_path):
    shutil.copytree(model_dir, tmp_path / "no_vocab")
    (tmp_path / "no_vocab" / "vocab.txt").unlink()
    text = corpus / "src" / "valid.txt"
    assert main(["--model", str(tmp_path / "no_vocab"), "--text", str(text)]) == USAGE_ERROR
    assert "no vocab.txt" in capsys.readouterr().err

    shutil.copytree(model_dir, tmp_path / "other_vocab")
    size = len(Vocab.load(str(corpus / "data" / "vocab.txt")))
    Vocab([f"x{i}" for i in range(size)]).save(str(tmp_path / "other_vocab" / "vocab.txt"))
    data = ["--data", str(corpus / "data"), "--split", "valid"]
    assert main(["--model", str(tmp_path / "other_vocab"), *data]) == USAGE_ERROR
    assert "another vocabulary" in capsys.readouterr().err

    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n"] * 20))
    with pytest.raises(DataError, match="another vocabulary .* tokenizer.json .* --tokenizer"):
        check_data_vocab(manifest_url(str(corpus / "data"), "valid"), subword, "subword_export")

    assert main(["--model", str(tmp_path), *data]) == USAGE_ERROR
    assert "config.json" in capsys.readouterr().err


# ---- sweeps ----


def test_a_sweep_row_is_the_plain_run_at_that_length(capsys, corpus, model_dir, tmp_path):
    data = ["--model", model_dir, "--data", corpus / "data", "--split", "valid", "--batch-size", 3]
    swept = txl_eval(
        capsys, *data, "--same-length", "false", "--sweep-mem-len", "12,0,4", "--out",
        tmp_path / "sweep.csv",
    )  # fmt: skip
    rows = swept["rows"]
    assert [(r["mem_len"], r["attn_len"]) for r in rows] == [(0, 6), (4, 10), (12, 18)]
    for row in rows:
        plain = txl_eval(capsys, *data, "--same-length", "false", "--mem-len", row["mem_len"])
        assert row["loss"] == pytest.approx(plain["loss"], abs=1e-6)
        assert row["tokens"] == plain["tokens"]
    assert rows[0]["loss"] != rows[2]["loss"]  # the memory changes what the model predicts
    assert read_csv(str(tmp_path / "sweep.csv")) == [SweepRow(**r) for r in rows]
    assert swept["effective_context"] == {
        str(model_dir): effective_context([6, 10, 18], [r["loss"] for r in rows], 0.01)
    }
    assert swept["recl"] == {}  # RECL compares a group

    clamp = txl_eval(capsys, *data, "--sweep-clamp-len=-1,2")["rows"]  # config: same_length
    assert [(r["clamp_len"], r["context"], r["attn_len"]) for r in clamp] == [
        (2, 2, 12),
        (-1, 12, 12),
    ]
    plain = txl_eval(capsys, *data, "--clamp-len", 2)
    assert clamp[0]["loss"] == pytest.approx(plain["loss"], abs=1e-6)


def test_a_same_length_sweep_starts_with_the_segment_alone(capsys, corpus, model_dir, tmp_path):
    data = ["--model", model_dir, "--data", corpus / "data", "--split", "valid", "--batch-size", 3]
    csv = tmp_path / "sweep.csv"
    swept = txl_eval(capsys, *data, "--sweep-mem-len", "0,4,12", "--out", csv)  # same_length
    rows = swept["rows"]
    assert [(r["mem_len"], r["context"], r["same_length"], r["segment_alone"]) for r in rows] == [
        (0, 0, False, True),
        (4, 4, True, False),
        (12, 12, True, False),
    ]
    alone = txl_eval(capsys, *data, "--mem-len", 0, "--same-length", "false")
    assert rows[0]["loss"] == pytest.approx(alone["loss"], abs=1e-6)
    assert rows[0]["tokens"] == alone["tokens"]
    plain = txl_eval(capsys, *data, "--mem-len", 4)
    assert rows[1]["loss"] == pytest.approx(plain["loss"], abs=1e-6)
    assert read_csv(str(csv)) == [SweepRow(**r) for r in rows]
    shown = render(SweepResult([SweepRow(**r) for r in rows], 0.01, {}, {}), False).splitlines()
    assert [line.split()[1] for line in shown[1:4]] == ["0*", "4", "12"]
    assert shown[4].startswith("* the segment alone")


def token_losses(model_dir, text_ids, rows: int, tgt_len: int, mem_len: int) -> np.ndarray:
    """Every scored token's loss, computed here with the model alone, in the sweep's order."""
    model = TransformerXL.from_pretrained(model_dir)
    model.set_lengths(tgt_len=tgt_len, mem_len=mem_len, same_length=False)
    mems, out = None, []
    with torch.no_grad():
        for input_ids, targets in TextBatches(text_ids, rows, tgt_len):
            result = model(input_ids, targets, mems)
            out.append(result.loss[targets != IGNORE_INDEX])
            mems = result.mems
    return torch.cat(out).numpy()


def test_a_group_sweep_gives_the_recl_of_its_models_token_losses(
    capsys, corpus, model_dir, tmp_path
):
    # Weights of std 0.5 attend sharply enough for the memory to change the losses.
    config = TransformerXL.from_pretrained(model_dir).config
    group = [tmp_path / "a", tmp_path / "b"]
    for seed, path in enumerate(group):
        torch.manual_seed(seed)
        TransformerXL(dataclasses.replace(config, init_std=0.5)).save_pretrained(path)
        shutil.copy(model_dir / "vocab.txt", path / "vocab.txt")
    text = corpus / "src" / "valid.txt"
    lengths = [0, 4, 16]
    result = txl_eval(
        capsys, "--model", group[0], "--model", group[1], "--text", text, "--batch-size", 2,
        "--same-length", "false", "--sweep-mem-len", ",".join(map(str, lengths)),
        "--recl-r", "0.1,1",
    )  # fmt: skip
    ids, _ = text_ids(str(text), Vocab.load(str(model_dir / "vocab.txt")))
    losses = np.stack([[token_losses(m, ids, 2, 6, mem) for mem in lengths] for m in group])
    contexts = [mem + 6 for mem in lengths]
    for r in (0.1, 1.0):
        expected = recl(losses, contexts, r)
        got = [next(x for x in result["recl"][str(m)] if x["r"] == r) for m in group]
        assert [(x["length"], x["capped"]) for x in got] == [(e.length, e.capped) for e in expected]
        for x, e in zip(got, expected):
            assert x["gains"] == pytest.approx(e.gains, abs=1e-6)
            assert max(e.gains) > 1e-4  # gains that would show tokens scored out of order


def test_models_that_cannot_be_compared_are_refused(capsys, corpus, model_dir, tmp_path):
    data = ["--data", str(corpus / "data"), "--split", "valid", "--no-progress"]
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "eval_tgt_len": 4}))
    group = ["--model", str(model_dir), "--model", str(other), *data, "--sweep-mem-len", "4"]
    assert main(group) == USAGE_ERROR
    assert "pass --tgt-len" in capsys.readouterr().err
    assert main([*group, "--tgt-len", "4"]) == 0
    with pytest.raises(SystemExit) as refused:
        main(["--model", str(model_dir), "--model", str(model_dir), *data, "--sweep-mem-len", "4"])
    assert refused.value.code == USAGE_ERROR  # argparse's refusals and ours: one exit status
    assert "each --model once" in capsys.readouterr().err
    # same_length with no memory attends to nothing: refused, plain or in a clamp sweep
    assert main(["--model", str(model_dir), *data, "--mem-len", "0"]) == USAGE_ERROR
    assert "--same-length false" in capsys.readouterr().err
    clamp_sweep = [*data, "--mem-len", "0", "--sweep-clamp-len", "2"]
    assert main(["--model", str(model_dir), *clamp_sweep]) == USAGE_ERROR
    assert "same_length needs mem_len >= 1" in capsys.readouterr().err


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
    copy_model(len(vocab)).save_pretrained(root / "model")  # a new directory: exports are atomic
    vocab.save(str(root / "model" / "vocab.txt"))
    rng = random.Random(0)
    lines = [" ".join(rng.choices(words, k=LAG)) for _ in range(6)]
    (root / "text.txt").write_text("".join(f"{line}\n" * 6 for line in lines))
    return root / "model", root / "text.txt"


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


def test_a_missing_include_path_is_named_before_the_harness_starts(capsys, model_dir, tmp_path):
    """Not after a minute of indexing the harness's tasks, as "not a registered task"."""
    args = ["--model", model_dir, "--tasks", "mine", "--include-path", tmp_path / "no-such-dir"]
    with pytest.raises(SystemExit) as exit_:
        main(list(map(str, args)))
    assert exit_.value.code == USAGE_ERROR
    assert "no-such-dir is not a directory of task YAML files" in capsys.readouterr().err


def planted(directory: Path, name: str, kind: str) -> None:
    """`name` in `directory` replaced by a link to /dev/zero, a link to the same file elsewhere,
    a FIFO, or a 5 GB sparse file."""
    path = directory / name
    if kind == "elsewhere" and path.exists():
        shutil.move(path, directory.parent / name)
    path.unlink(missing_ok=True)
    if kind in ("link", "elsewhere"):
        path.symlink_to("/dev/zero" if kind == "link" else directory.parent / name)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            f.truncate(5 << 30)


@pytest.mark.parametrize(
    "name, kind, refusal",
    [
        ("config.json", "link", "config.json is a link: a model config (config.json) is read"),
        ("config.json", "fifo", "config.json is not a regular file (a FIFO, device or directory)"),
        ("config.json", "sparse", "config.json holds more than TXL_MAX_METADATA_BYTES=67108864"),
        ("config.json", "elsewhere", "config.json is a link: a model config (config.json)"),
        ("vocab.txt", "link", "vocab.txt is a link: a vocabulary file (vocab.txt) is read"),
        ("vocab.txt", "elsewhere", "vocab.txt is a link"),
        ("vocab.txt", "fifo", "vocab.txt is not a regular file"),
        ("vocab.txt", "sparse", "vocab.txt holds more than TXL_MAX_VOCAB_BYTES=268435456 bytes"),
        ("data.json", "link", "data.json is a link"),
        ("data.json", "fifo", "data.json is not a regular file"),
        ("data.json", "sparse", "data.json holds more than TXL_MAX_METADATA_BYTES"),
        ("model.safetensors", "elsewhere", "model.safetensors is a link or not a regular file"),
        ("model.safetensors", "fifo", "model.safetensors is a link or not a regular file"),
    ],
)
@pytest.mark.parametrize("source", ["--text", "--data"])
def test_an_exports_file_that_is_no_regular_file_of_its_own_is_refused_in_one_line(
    capsys, corpus, model_dir, tmp_path, name, kind, refusal, source
):
    """A received export's files: a link (to /dev/zero: read until MemoryError), a FIFO (open()
    blocked start-up, SIGTERM ignored), a sparse file (read whole)."""
    export = Path(shutil.copytree(model_dir, tmp_path / "export"))
    planted(export, name, kind)
    data = [source, corpus / "src" / "valid.txt"] if source == "--text" else []
    data = data or [source, corpus / "data", "--split", "valid"]
    args = ["--model", export, *data, "--no-progress"]
    assert without_blocking(export / name, lambda: main(list(map(str, args)))) == USAGE_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("txl-eval: error: ") and refusal in line


@pytest.mark.parametrize("kind", ["device", "sparse"])
def test_text_past_its_cap_is_refused_in_one_line(capsys, model_dir, tmp_path, monkeypatch, kind):
    """--text of /dev/zero (a device: read up to the cap) or a 20 GB sparse file (refused by its
    size): both were read whole."""
    text = Path("/dev/zero")
    if kind == "sparse":
        text = tmp_path / "huge.txt"
        with open(text, "wb") as f:
            f.truncate(20 << 30)
    else:
        monkeypatch.setenv("TXL_MAX_TEXT_BYTES", str(4 << 20))
    assert main(["--model", str(model_dir), "--text", str(text), "--no-progress"]) == USAGE_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"txl-eval: error: {text} holds more than TXL_MAX_TEXT_BYTES=")
    assert line.endswith("bytes: not a text file (raise the cap for a file you trust)")


def test_text_is_read_under_its_cap_and_scored_the_same_in_blocks(capsys, corpus, model_dir):
    text = corpus / "src" / "valid.txt"
    whole = txl_eval(capsys, "--model", model_dir, "--text", text)
    size = text.stat().st_size
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("txl_dist.exports.text.TEXT_LINES", 7)  # many blocks, one ids array
        patch.setenv("TXL_MAX_TEXT_BYTES", str(size))
        assert txl_eval(capsys, "--model", model_dir, "--text", text) == {
            **whole,
            **{k: ANY for k in ("tokens_per_s", "seconds")},
        }
        patch.setenv("TXL_MAX_TEXT_BYTES", str(size - 1))
        assert main(["--model", str(model_dir), "--text", str(text)]) == USAGE_ERROR
    assert "holds more than TXL_MAX_TEXT_BYTES" in capsys.readouterr().err


@pytest.mark.parametrize("rows", [10**12, 10**6])
@pytest.mark.parametrize("source", ["--text", "--data"])
def test_more_evaluation_rows_than_tokens_are_refused_before_anything_is_allocated(
    capsys, corpus, model_dir, tmp_path, rows, source
):
    """A received data.json's evaluation.rows of 10**12 made a 16 TB allocation, or a loop."""
    export = Path(shutil.copytree(model_dir, tmp_path / "export"))
    (export / DATA_FILE).write_text(json.dumps({"evaluation": {"rows": rows, "dtype": "fp32"}}))
    data = [source, corpus / "src" / "valid.txt"] if source == "--text" else []
    data = data or [source, corpus / "data", "--split", "valid"]
    assert main([*map(str, ["--model", export, *data]), "--no-progress"]) == USAGE_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert f"txl-eval: error: {rows} rows (--batch-size, else the export's data.json" in line
    assert line.endswith(": pass a smaller --batch-size")


def test_progress_bars_show_on_a_terminal_only(capsys, corpus, model_dir, tmp_path):
    data = ["--model", str(model_dir), "--data", str(corpus / "data"), "--split", "valid"]
    assert main([*data, "--batch-size", "3"]) == 0
    assert main([*data, "--batch-size", "3", "--sweep-mem-len", "0,4"]) == 0
    src = corpus / "src"
    argv = [
        "--dataset",
        "text",
        "--source",
        str(src),
        "--out",
        str(tmp_path / "d"),
        "--workers",
        "1",
    ]
    assert prepare_main([*argv, "--text-docs", "file"]) == 0
    err = capsys.readouterr().err  # not a terminal: a log file's view
    assert "\r" not in err and "%|" not in err, err[-500:]
