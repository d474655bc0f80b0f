"""txl-export --format hf: transformers loads the directory offline with its own code, and it
computes what our model computes, generation included."""

from __future__ import annotations

import json
import re

import pytest
import torch
import transformers

from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.vocab import Vocab
from txl_dist.exports.generation import Sampling, generate
from txl_dist.exports.text import ExportText
from txl_dist.hf.export import save_hf
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.transformer import VOCAB_FILE

N_TOKEN = 50


@pytest.fixture(scope="module")
def ours() -> TransformerXL:
    """A random model with tied adaptive softmax clusters, at the lengths txl-generate uses."""
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=N_TOKEN, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, cutoffs=[20],
        div_val=2, tgt_len=8, mem_len=8, eval_tgt_len=6, eval_mem_len=5, eval_clamp_len=7,
        eval_same_length=True, dropout=0.0, init_std=0.5,
    )  # fmt: skip
    model = TransformerXL(config).eval()
    model.set_lengths(mem_len=5, clamp_len=7, same_length=False)
    return model


@pytest.fixture(scope="module")
def hf_dir(ours, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "txl-hf"
    vocab = Vocab([f"w{i}" for i in range(N_TOKEN)])

    save_hf(ours, str(out), lambda d: vocab.save(f"{d}/{VOCAB_FILE}"))
    return out


WORDS = Vocab(["<eos>", "<unk>", *(f"w{i}" for i in range(2, N_TOKEN))])
"""A word-level vocabulary as WikiText's: an end-of-line and an unknown token."""


@pytest.fixture(scope="module")
def hf_words_dir(ours, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf-words") / "txl-hf"
    save_hf(ours, str(out), lambda d: WORDS.save(f"{d}/{VOCAB_FILE}"))
    return out


@pytest.fixture(scope="module")
def theirs(hf_dir):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_OFFLINE", "1")
        model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, trust_remote_code=True)
    return model.eval()


def test_the_directory_needs_neither_our_package_nor_the_network(hf_dir):
    names = {p.name for p in hf_dir.iterdir()}
    assert {"config.json", "model.safetensors", "modeling_txl.py", VOCAB_FILE} <= names
    ours_imported = re.compile(r"^\s*(from|import)\s+(txl_dist|data_pipeline)\b", re.M)
    for path in hf_dir.glob("*.py"):
        assert not ours_imported.search(path.read_text()), path.name


def test_logits_and_loss_are_ours(ours, theirs):
    assert type(theirs).__name__ == "TXLForCausalLM"
    assert next(theirs.parameters()).dtype == torch.float32
    ids = torch.randint(0, N_TOKEN, (3, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = theirs(ids, labels=ids)
        mine = ours(ids)
        mine_loss = ours(ids[:, :-1], targets=ids[:, 1:]).loss.mean()
        # the memory goes on as ours does
        following = ids.flip(1)
        then = theirs(following, mems=out.mems).logits
        assert torch.allclose(then, ours(following, mems=mine.mems).log_probs, atol=1e-5)
    assert torch.allclose(out.logits, mine.log_probs, atol=1e-5)
    assert out.loss.item() == pytest.approx(mine_loss.item(), abs=1e-5)


def test_greedy_generate_is_ours_token_for_token(ours, theirs):
    prompt = torch.tensor([3, 17, 25, 4, 9])
    steps = 12  # more than mem_len: the memory is cut as ours is
    greedy = Sampling(temperature=0)
    expected = [t for t, _ in generate(ours, prompt, steps, greedy, torch.Generator())]
    with torch.no_grad():
        got = theirs.generate(prompt[None], max_new_tokens=steps, do_sample=False)
    assert got[0, len(prompt) :].tolist() == expected
    assert len(set(expected)) > 1  # a generation that could differ

    lone = [[5, 9, 30, 2, 44, 7], [12], [3, 3, 8]]  # prompts as txl-generate gets them
    alone = [
        [t for t, _ in generate(ours, torch.tensor(p), 4, greedy, torch.Generator())] for p in lone
    ]
    width = max(map(len, lone))
    padded = torch.tensor([[0] * (width - len(p)) + p for p in lone])  # left padding, any id
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in lone])
    with torch.no_grad():
        batched = theirs.generate(padded, attention_mask=mask, max_new_tokens=4, do_sample=False)
    assert batched[:, width:].tolist() == alone  # past mem_len (5) too
    assert len({tuple(row) for row in alone}) == 3


def test_auto_tokenizer_reads_text_as_the_data_was_prepared(hf_words_dir, tmp_path, monkeypatch):
    """No remote code: tokenizer.json is a WordLevel model over vocab.txt, a line break is
    <eos> and an unknown word <unk>, exactly as txl-generate and txl-eval --text read text."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_words_dir)
    text = "w2 w7  w3\nw9 nope\n"
    WORDS.save(str(tmp_path / VOCAB_FILE))  # a plain export's vocabulary, as our commands read it
    assert tokenizer(text)["input_ids"] == ExportText(str(tmp_path)).encode(text)[0].tolist()
    assert tokenizer.eos_token == tokenizer.pad_token == "<eos>" and tokenizer.unk_token == "<unk>"
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == "w2 w7 w3 w9"
    generation = json.loads((hf_words_dir / "generation_config.json").read_text())
    assert generation == {"eos_token_id": 0, "pad_token_id": 0}


def test_pipeline_generates_what_txl_generate_does_and_stops_at_the_end_token(
    ours, hf_words_dir, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pipe = transformers.pipeline("text-generation", model=str(hf_words_dir), trust_remote_code=True)
    steps = 16
    got = pipe("w3 w17 w25 w4 w9", max_new_tokens=steps, do_sample=False, return_full_text=False)
    prompt = torch.tensor([3, 17, 25, 4, 9])
    ids = [t for t, _ in generate(ours, prompt, steps, Sampling(temperature=0), torch.Generator())]
    assert 0 in ids and len(set(ids)) > 2  # ours goes on past <eos> (id 0), with some variety
    ended = ids[: ids.index(0)]
    model = pipe.model  # generate() alone stops there too, by generation_config.json
    with torch.no_grad():
        alone = model.generate(prompt[None], max_new_tokens=steps, do_sample=False)
    assert alone[0, len(prompt) :].tolist() == [*ended, 0]
    assert got[0]["generated_text"].split() == [w for w in WORDS.decode(ended) if w != "<unk>"]


def test_a_subword_export_names_its_end_of_text_token_and_generate_stops_at_it(
    tmp_path, monkeypatch
):
    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n", "a dog sat\n"] * 20))
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(subword), n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, cutoffs=[],
        tgt_len=8, mem_len=8, dropout=0.0, init_std=0.5,
    )  # fmt: skip
    model = TransformerXL(config).eval()
    with torch.no_grad():  # the end-of-text token likely, so greedy draws it in a few steps
        model.crit.out_layers[0].bias[subword.eos_id] = 7.0
    out = tmp_path / "txl-hf"
    save_hf(model, str(out), lambda d: subword.save(f"{d}/{TOKENIZER_FILE}"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == tokenizer.bos_token == tokenizer.pad_token == "<|endoftext|>"
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation == {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    prompt = torch.tensor([0, *subword.encode("the cat")])  # a document starts after it
    steps = 40
    ours = [t for t, _ in generate(model, prompt, steps, Sampling(temperature=0), torch.Generator(),
                                   stop=0)]  # fmt: skip
    assert 0 < len(ours) < steps  # ours stopped at the token: so does generate(), by its config
    with torch.no_grad():
        alone = theirs.eval().generate(prompt[None], max_new_tokens=steps, do_sample=False)
    assert alone[0, len(prompt) :].tolist() == [*ours, 0]


def test_save_pretrained_and_from_pretrained_round_trip(hf_words_dir, tmp_path, monkeypatch):
    """What transformers' users do next: save the model and tokenizer elsewhere and load them
    back (the remote code goes along): the same logits, the same greedy tokens."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(hf_words_dir, trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_words_dir)
    model.save_pretrained(tmp_path / "copy")
    tokenizer.save_pretrained(tmp_path / "copy")
    again = auto.from_pretrained(tmp_path / "copy", trust_remote_code=True).eval()
    ids = transformers.AutoTokenizer.from_pretrained(tmp_path / "copy")(
        "w3 w17\nw25", return_tensors="pt"
    ).input_ids
    assert ids.tolist() == tokenizer("w3 w17\nw25", return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
        greedy = dict(max_new_tokens=6, do_sample=False)
        assert again.generate(ids, **greedy).tolist() == model.generate(ids, **greedy).tolist()
