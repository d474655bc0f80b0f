"""Training on data.mix of two subword corpora with real DeepSpeed engines: two ranks train and
save, one process resumes; mix_tokens in every log row, every corpus evaluated, then their
token-weighted mean. Then what the tokenizer is used for after training: every checkpoint
carries it and records its end-of-text token (a custom one, --eos-token), txl-export copies both
into the export, txl-eval --text, txl-generate, the harness and transformers read and write
text with them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from data_pipeline import load_manifest, manifest_url, prepare
from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.streams.text_batches import TextBatches
from tests.data_pipeline.corpora.test_records import write_jsonl
from tests.data_pipeline.corpora.test_subword import renamed_end_token
from tests.engine.checkpoint.test_card import HOSTILE, assert_renders_as_text
from tests.integration.runs import records, train
from txl_dist.cli import evaluate, generate
from txl_dist.cli.export import export
from txl_dist.cli.export import main as export_main
from txl_dist.engine.checkpoint import CLIENT_FILE
from txl_dist.engine.checkpoint.consolidate import ExportError
from txl_dist.evaluation.loop import evaluate as score
from txl_dist.exports.generation import shown
from txl_dist.exports.loading import load_for_evaluation
from txl_dist.exports.text import ExportText
from txl_dist.harness import TXLM

ROWS, TGT_LEN = 8, 64  # the tiny config's global rows and tgt_len
LAYOUT = {"sample_size": 5_000, "shard_size": 50_000, "progress": False}
# The tiny config's softmax clusters are for a word vocabulary: none for a 600-token BPE.
SUBWORD_MODEL = ["model.cutoffs=[]", "model.tie_projs=[false]"]


END = "<|doc_end|>"
"""The corpora's end-of-text token: a name of none of the known ones (EOS_NAMES), so only the
records (manifests, checkpoints, exports) tell it."""


@pytest.fixture(scope="module")
def corpora(shared_data, tmp_path_factory) -> Path:
    """wiki (WikiText-103 paragraphs) and news (One Billion Word sentences) as JSONL corpora
    under the root, prepared with a byte-level BPE of 600 tokens trained on wiki whose
    end-of-text token is END (txl-prepare --tokenizer FILE --eos-token END)."""
    root = tmp_path_factory.mktemp("corpora")
    lines = (shared_data / "wikitext-103" / "wiki.train.tokens").open(encoding="utf-8")
    wiki = [
        line for _, line in zip(range(1500), lines) if line.strip() and not line.startswith(" = ")
    ]
    source = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    news = source.read_text(encoding="utf-8").splitlines(keepends=True)[:800]
    for name, docs in (("wiki", wiki), ("news", news)):
        held_out = len(docs) // 4
        write_jsonl(root / "src" / name / "train" / "docs.jsonl", docs[held_out:])
        write_jsonl(root / "src" / name / "valid" / "docs.jsonl", docs[:held_out])
    shared = root / TOKENIZER_FILE
    shared.write_text(renamed_end_token(Subword.train_bpe(600, iter(wiki[len(wiki) // 4 :])), END))
    for name in ("wiki", "news"):
        source = str(root / "src" / name)
        prepare("jsonl", str(root / name), source, tokenizer=str(shared), eos_token=END, **LAYOUT)
    return root


@pytest.fixture(scope="module")
def mix(corpora) -> list[str]:
    """The overrides of a run on wiki 0.6 / news 0.4, evaluated and saved at steps 3 and 6."""
    corpus = [
        {"name": "wiki", "path": str(corpora / "wiki"), "weight": 0.6},
        {"name": "news", "path": str(corpora / "news"), "weight": 0.4},
    ]
    overrides = ["data.path=null", f"data.mix={json.dumps(corpus)}", "train.max_steps=6"]
    return [*overrides, *SUBWORD_MODEL, "train.save_interval=3", "train.eval_interval=3"]


@pytest.fixture(scope="module")
def mixed_training(corpora, mix, tmp_path_factory) -> tuple[Path, str]:
    """The run directory of the mix trained on two ranks, and what the launcher printed."""
    out = tmp_path_factory.mktemp("mixed")
    proc = train(out, corpora / "wiki", overrides=mix)
    return out, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def mixed_run(mixed_training) -> Path:
    """The run directory of the mix trained on two ranks."""
    return mixed_training[0]


@pytest.mark.slow
def test_a_mix_logs_its_tokens_evaluates_each_corpus_and_resumes_on_another_world_size(
    corpora, mix, mixed_training, tmp_path
):
    out, output = mixed_training
    # 6 steps of 64 tokens a row are too few for the weights: said once, at start-up.
    warnings = [line for line in output.splitlines() if "data.mix: 384 tokens per row" in line]
    assert len(warnings) == 1 and "mean documents of corpus wiki" in warnings[0], output[-3000:]
    rows = records(out)
    drawn = {r["step"]: r["mix_tokens"] for r in rows if "split" not in r}
    assert list(drawn) == [1, 2, 3, 4, 5, 6]
    assert all(sum(d.values()) == step * ROWS * TGT_LEN for step, d in drawn.items())
    assert all(d["wiki"] > 0 and d["news"] > 0 for step, d in drawn.items() if step > 2)
    evals = [r for r in rows if r.get("split") == "valid"]
    assert [(r["step"], r.get("corpus")) for r in evals] == [
        (3, "wiki"), (3, "news"), (3, None), (6, "wiki"), (6, "news"), (6, None),
    ]  # fmt: skip
    wiki, news_, mean = evals[3:]
    assert mean["tokens"] == wiki["tokens"] + news_["tokens"]
    weighted = (wiki["loss"] * wiki["tokens"] + news_["loss"] * news_["tokens"]) / mean["tokens"]
    assert math.isclose(mean["loss"], weighted) and math.isclose(mean["ppl"], math.exp(weighted))

    # The state every rank saved holds all rows: one process resumes them, batch for batch.
    resumed = tmp_path / "resumed"
    checkpoint = str(out / "checkpoints" / "global_step3")
    train(resumed, corpora / "wiki", nprocs=1, overrides=mix, resume=checkpoint)
    again = {r["step"]: r["mix_tokens"] for r in records(resumed) if "split" not in r}
    assert again == {step: d for step, d in drawn.items() if step > 3}


@contextlib.contextmanager
def moved_away(root: Path):
    """`root` under another name while inside: what a checkpoint names is not there."""
    aside = root.with_name(root.name + "-aside")
    root.rename(aside)
    try:
        yield
    finally:
        aside.rename(root)


def copy_with_tokenizer(tag: Path, into: Path, tokenizer: bytes | None) -> Path:
    """A copy of checkpoint `tag` with another tokenizer.json (None: without one, as saved
    before checkpoints carried it), its record made to match, as anyone could: sizes and
    CRC-32s prove no more than the record does."""
    copy = into / tag.name
    shutil.copytree(tag, copy)
    record = json.loads((copy / CLIENT_FILE).read_text())
    if tokenizer is None:
        (copy / TOKENIZER_FILE).unlink()
        del record["files"][TOKENIZER_FILE]
    else:
        (copy / TOKENIZER_FILE).write_bytes(tokenizer)
        record["files"][TOKENIZER_FILE] = {
            "bytes": len(tokenizer), "crc32": f"{zlib.crc32(tokenizer):08x}"
        }  # fmt: skip
    (copy / CLIENT_FILE).write_text(json.dumps(record))
    return copy


@pytest.mark.slow
def test_the_tokenizer_goes_with_checkpoints_and_exports_and_reads_and_writes_their_text(
    corpora, mixed_run, shared_data, tmp_path, capsys
):
    tokenizer_json = (corpora / "wiki" / TOKENIZER_FILE).read_bytes()
    library = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
    tag = mixed_run / "checkpoints" / "global_step6"
    assert (tag / TOKENIZER_FILE).read_bytes() == tokenizer_json
    record = json.loads((tag / CLIENT_FILE).read_text())
    assert TOKENIZER_FILE in record["files"] and record["eos_token"] == END

    model_dir = tmp_path / "export"
    with moved_away(corpora):  # the checkpoint's own tokenizer: no data root needed
        export(str(mixed_run), str(model_dir))
    assert (model_dir / TOKENIZER_FILE).read_bytes() == tokenizer_json
    data = json.loads((model_dir / "data.json").read_text())
    assert data["tokenizer"] == {
        "sha256": hashlib.sha256(tokenizer_json).hexdigest(),
        "bytes": len(tokenizer_json),
    }  # what loads check the export's tokenizer.json against
    assert data["eos_token"] == END  # the data's, which no known name would find
    assert not (model_dir / "vocab.txt").exists()
    readme = (model_dir / "README.md").read_text()
    assert f"subword tokenizer {TOKENIZER_FILE} of {library.get_vocab_size()} tokens" in readme
    evals = {r.get("corpus"): r for r in records(mixed_run) if r.get("step") == 6 and "split" in r}
    for name in ("wiki", "news"):
        assert f"- valid {name}: loss {evals[name]['loss']:.4f}" in readme
    assert f"- valid (the corpora's token-weighted mean): loss {evals[None]['loss']:.4f}" in readme

    # Byte-level BPE gives real text back exactly, in one piece or as generated, token by token.
    lines = (shared_data / "wikitext-103" / "wiki.valid.tokens").read_text(encoding="utf-8")
    text = "".join(lines.splitlines(keepends=True)[:60])
    assert any(ord(c) > 127 for c in text)  # characters of several bytes, split over tokens
    words = ExportText(str(model_dir))
    for line in text.splitlines(keepends=True):
        ids = words.encode(line)[0].tolist()
        assert ids == library.encode(line, add_special_tokens=False).ids
        assert words.decode(ids) == library.decode(ids) == line
        assert "".join(words.pieces(ids, prompt="")) == line

    # txl-eval --text scores the tokenizer's ids of the file, as one document: after the
    # end-of-text token, every token of it.
    eos = library.token_to_id(END)
    text_file = tmp_path / "valid.txt"
    text_file.write_text(text, encoding="utf-8")
    args = ["--model", str(model_dir), "--text", str(text_file)]
    args += ["--batch-size", "2", "--dtype", "fp32"]  # as below, not the run's recorded bf16
    assert evaluate.main([*args, "--json", "--no-progress"]) == 0
    ours = json.loads(capsys.readouterr().out)
    model = load_for_evaluation(str(model_dir), torch.device("cpu"))
    ids = np.asarray([eos, *library.encode(text, add_special_tokens=False).ids], np.int64)
    batches = TextBatches(ids, 2, model.config.tgt_len)
    expected = score(model, batches, torch.device("cpu"), progress=False)
    assert ours["tokens"] == expected.tokens == len(ids) - 1
    assert ours["loss"] == pytest.approx(expected.loss, rel=1e-6)

    # txl-generate: the prompt's ids are the tokenizer's after its end-of-text token (a new
    # document), the text printed is the decoding of what was drawn before that token, if drawn.
    prompt = "The tower , built in 1889 ,"
    args = ["--model", str(model_dir), "--prompt", prompt, "--max-tokens", "40", "--seed", "1"]
    assert generate.main([*args, "--json"]) == 0
    drawn = json.loads(capsys.readouterr().out)
    assert drawn["prompt_ids"] == [eos, *library.encode(prompt, add_special_tokens=False).ids]
    assert drawn["stopped"] == ("max_tokens" if len(drawn["ids"]) == 40 else "eos")
    assert eos not in drawn["ids"] and drawn["text"] == library.decode(drawn["ids"])
    assert generate.main(args) == 0
    assert capsys.readouterr().out == shown(prompt + drawn["text"]) + "\n"

    # The harness starts each request after the same token; a Hugging Face export of the run
    # names it as end, padding and beginning token, so generate() stops at it.
    assert TXLM(str(model_dir), device="cpu").encode_pair(prompt, " 1889")[0][0] == eos
    export(str(mixed_run), str(tmp_path / "hf"), format="hf")
    assert json.loads((tmp_path / "hf" / "special_tokens_map.json").read_text()) == {
        "bos_token": END, "eos_token": END, "pad_token": END
    }  # fmt: skip
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation == {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}

    # A checkpoint from before they carried the tokenizer: the data root's, else --vocab's.
    old = copy_with_tokenizer(tag, tmp_path / "old", None)
    export(str(old), str(tmp_path / "old-export"))
    assert (tmp_path / "old-export" / TOKENIZER_FILE).read_bytes() == tokenizer_json
    assert json.loads((tmp_path / "old-export" / "data.json").read_text())["eos_token"] == END
    with moved_away(corpora):
        with pytest.raises(ExportError, match="vocab.txt .*not found.*pass --vocab FILE"):
            export(str(old), str(tmp_path / "refused"))
        export(str(old), str(tmp_path / "old-vocab"), vocab_path=str(model_dir / TOKENIZER_FILE))
    assert (tmp_path / "old-vocab" / TOKENIZER_FILE).read_bytes() == tokenizer_json

    # A checkpoint whose tokenizer is not the one it records is refused, in one line.
    copy = copy_with_tokenizer(tag, tmp_path / "stranger", tokenizer_json + b"\n")
    with pytest.raises(ExportError, match=f"{TOKENIZER_FILE} has sha256 .* vocab_sha256") as err:
        export(str(copy), str(tmp_path / "refused"))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_an_export_shares_no_local_path_says_subword_and_quotes_txl_json_as_text(
    corpora, mixed_run, tmp_path
):
    """txl-export of a received checkpoint whose txl.json holds HTML and links, in both
    formats: data.json and the manifests say subword, the README holds no absolute local path
    and renders txl.json's text as text; the export follows the umask."""
    for name in ("wiki", "news"):
        assert load_manifest(manifest_url(str(corpora / name), "train")).level == "subword"
    received = tmp_path / "received" / "global_step6"
    shutil.copytree(mixed_run / "checkpoints" / "global_step6", received)
    record = json.loads((received / CLIENT_FILE).read_text())
    (received / CLIENT_FILE).write_text(json.dumps(record | HOSTILE))
    before = os.umask(0o002)
    try:
        for fmt in ("safetensors", "hf"):
            assert export_main([str(received), str(tmp_path / fmt), "--format", fmt]) == 0
    finally:
        os.umask(before)
    for fmt in ("safetensors", "hf"):
        out = tmp_path / fmt
        assert json.loads((out / "data.json").read_text())["level"] == "subword"
        readme = (out / "README.md").read_text()
        assert "/" + str(tmp_path).split("/")[1] not in readme  # no absolute local path
        assert_renders_as_text(readme)
        assert stat.S_IMODE(out.stat().st_mode) == 0o775
