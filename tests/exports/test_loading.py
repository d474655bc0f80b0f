"""An export's tokenizer.json is checked on load by txl-generate and txl-eval: against the record
txl-export made of it in data.json, and against the model's n_token."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.cli import USAGE_ERROR, evaluate, generate
from txl_dist.exports.loading import DATA_FILE, tokenizer_record
from txl_dist.model import TransformerXL, TXLConfig

DOCS = [f"the cat {i} sat on mat {i * 7} over a log {i * 13}\n" for i in range(300)]


def bpe(size: int, docs: list[str]) -> Subword:
    subword = Subword.train_bpe(size, iter(docs))
    assert len(subword) == size
    return subword


def export(directory: Path, subword: Subword, n_token: int, record: bool = True) -> str:
    """A small model's export with ``subword`` as its tokenizer.json and data.json as txl-export
    writes it (``record``: with the tokenizer's record; an export from before, without)."""
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=n_token, n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, cutoffs=[],
        tgt_len=8, mem_len=8, eval_mem_len=8, dropout=0.0,
    )  # fmt: skip

    def write_extra(tmp: str) -> None:
        subword.save(os.path.join(tmp, TOKENIZER_FILE))
        data = {"dataset": "jsonl", "level": "word"}
        if record:
            data["tokenizer"] = tokenizer_record(subword)
        Path(tmp, DATA_FILE).write_text(json.dumps(data))

    TransformerXL(config).save_pretrained(directory, write_extra=write_extra)
    return str(directory)


def run(command, model_dir: str, tmp_path: Path) -> int:
    """txl-generate or txl-eval --text on the export."""
    if command is generate:
        return generate.main(["--model", model_dir, "--prompt", "the cat", "--max-tokens", "3"])
    (tmp_path / "text.txt").write_text("the cat sat on the mat\n" * 4)
    text = ["--text", str(tmp_path / "text.txt"), "--batch-size", "1", "--no-progress"]
    return evaluate.main(["--model", model_dir, *text])


COMMANDS = {"txl-generate": generate, "txl-eval --text": evaluate}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_swapped_tokenizer_is_refused(tmp_path, capsys, command):
    model_dir = export(tmp_path / "export", bpe(300, DOCS), 300)
    other = bpe(300, [d.upper() for d in DOCS])  # as many tokens, other merges
    other.save(os.path.join(model_dir, TOKENIZER_FILE))
    assert run(COMMANDS[command], model_dir, tmp_path) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{TOKENIZER_FILE} has sha256 {other.sha256[:12]} (" in err
    assert "data.json records " in err and "not the tokenizer the model was trained with" in err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("record", [True, False])
def test_a_tokenizer_with_ids_past_the_model_is_refused(tmp_path, capsys, command, record):
    larger = bpe(320, DOCS)  # ids up to 319, the model's rows 0..299
    model_dir = export(tmp_path / "export", larger, 300, record)
    assert run(COMMANDS[command], model_dir, tmp_path) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{TOKENIZER_FILE} has 320 tokens but config.json has n_token 300" in err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("record", [True, False])
def test_the_tokenizer_the_model_was_exported_with_loads(tmp_path, capsys, command, record):
    model_dir = export(tmp_path / "export", bpe(300, DOCS), 300, record)
    assert run(COMMANDS[command], model_dir, tmp_path) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "data, named",
    [
        ([], "holds a JSON list, not an object"),
        ("word", "holds a JSON str, not an object"),
        ({"eos_token": 5}, "eos_token 5 is not a text"),
        ({"level": ["word"]}, "level ['word'] is not a text"),
        ({"evaluation": [10, "fp32"]}, "evaluation [10, 'fp32'] is not an object"),
        ({"tokenizer": "abc"}, "tokenizer 'abc' is not an object"),
    ],
)
def test_a_malformed_data_json_is_one_line_naming_the_key(tmp_path, capsys, command, data, named):
    model_dir = export(tmp_path / "export", bpe(300, DOCS), 300)
    Path(model_dir, DATA_FILE).write_text(json.dumps(data))
    assert run(COMMANDS[command], model_dir, tmp_path) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{DATA_FILE}: {named}" in err or f"{DATA_FILE} {named}" in err, err
    assert "export the checkpoint again" in err


def test_loading_an_export_imports_no_training_or_evaluation_loop_and_no_compiler(tmp_path):
    """txl-generate and the Hugging Face side load exports: that must not pull in DeepSpeed's
    engine, the evaluation loop or torch's compiler stack (seconds of imports, for nothing)."""
    model_dir = export(tmp_path / "export", bpe(300, DOCS), 300)
    loaded = (
        "import sys, torch; from txl_dist.exports.loading import load_for_evaluation; "
        f"load_for_evaluation({model_dir!r}, torch.device('cpu')); print(sorted(sys.modules))"
    )
    proc = processes.run([sys.executable, "-c", loaded], timeout=120, check=True, cwd=REPO_ROOT)
    modules = set(proc.stdout.split("'")[1::2])
    assert "txl_dist.exports.loading" in modules
    unwanted = {
        "txl_dist.evaluation.loop",
        "txl_dist.evaluation.sweep",
        "deepspeed",
        "torch._dynamo",
    }
    assert not modules & unwanted
