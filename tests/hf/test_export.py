"""txl-export --format hf: transformers loads the directory offline with its own code, and it
computes what our model computes, generation included."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.vocab import Vocab
from tests.cli.test_generate import char_model_dir
from tests.data_pipeline import paper_inputs as pi
from tests.data_pipeline.corpora.test_subword import renamed_end_token
from txl_dist.cli import generate as txl_generate
from txl_dist.exports.generation import Sampling, generate
from txl_dist.exports.loading import DATA_FILE
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
    width = max(map(len, lone))
    padded = torch.tensor([[0] * (width - len(p)) + p for p in lone])  # left padding, any id
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in lone])
    assert_batched_is_each_alone(ours, theirs, lone, padded, mask, steps=4)  # past mem_len (5)


def assert_batched_is_each_alone(
    ours: TransformerXL, theirs, prompts: list[list[int]], padded, mask, steps: int
) -> None:
    """Greedy generate() of the left-`padded` batch of `prompts` (with its attention `mask`)
    draws for each row what ours draws after that prompt alone, and the rows differ."""
    greedy = Sampling(temperature=0)
    alone = [
        [t for t, _ in generate(ours, torch.tensor(p), steps, greedy, torch.Generator())]
        for p in prompts
    ]
    with torch.no_grad():
        batched = theirs.generate(
            padded, attention_mask=mask, max_new_tokens=steps, do_sample=False
        )
    assert batched[:, padded.size(1) :].tolist() == alone
    assert len({tuple(row) for row in alone}) == len(prompts)


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


@pytest.mark.parametrize("end", ["<|endoftext|>", "<|doc_end|>"])
def test_a_subword_export_names_its_end_of_text_token_and_generate_stops_at_it(
    end, tmp_path, monkeypatch
):
    """The end token is the one data.json names (txl-export records the data's, of any name:
    txl-prepare --eos-token); an export without that record takes the tokenizer's own."""
    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n", "a dog sat\n"] * 20))
    tokenizer_json = renamed_end_token(subword, end)
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(subword), n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, cutoffs=[],
        tgt_len=8, mem_len=8, dropout=0.0, init_std=0.5,
    )  # fmt: skip
    model = TransformerXL(config).eval()
    with torch.no_grad():  # the end-of-text token likely, so greedy draws it in a few steps
        model.crit.out_layers[0].bias[subword.eos_id] = 7.0
    out = tmp_path / "txl-hf"

    def tokenizer_files(directory: str) -> None:
        (Path(directory) / TOKENIZER_FILE).write_text(tokenizer_json)
        if end != subword.eos:
            (Path(directory) / DATA_FILE).write_text(json.dumps({"eos_token": end}))

    save_hf(model, str(out), tokenizer_files)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == tokenizer.bos_token == tokenizer.pad_token == end
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


@pytest.mark.parametrize(
    "kind,text", [("words", "w3 w17\nw25"), ("enwik8", "the tower\nis"), ("text8", "the tower")]
)
def test_save_pretrained_and_from_pretrained_round_trip(
    hf_words_dir, char_exports, kind, text, tmp_path, monkeypatch
):
    """What transformers' users do next: save the model and tokenizer elsewhere and load them
    back (the remote code goes along): the same ids, logits and greedy tokens."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exported = hf_words_dir if kind == "words" else char_exports[kind][1]
    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(exported, trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    model.save_pretrained(tmp_path / "copy")
    tokenizer.save_pretrained(tmp_path / "copy")
    again = auto.from_pretrained(tmp_path / "copy", trust_remote_code=True).eval()
    copied = transformers.AutoTokenizer.from_pretrained(tmp_path / "copy")
    ids = copied(text, return_tensors="pt").input_ids
    assert ids.tolist() == tokenizer(text, return_tensors="pt").input_ids.tolist()
    assert copied.pad_token_id == tokenizer.pad_token_id is not None
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
        greedy = dict(max_new_tokens=6, do_sample=False)
        assert again.generate(ids, **greedy).tolist() == model.generate(ids, **greedy).tolist()


# ---- character-level exports ----

CHAR_PROMPTS = {
    "enwik8": ["The café\nis", "A", "tower of 1889 ,"],  # bytes: a line break is dropped
    "text8": [" of the ", "a", "the tower is"],  # characters: the text stripped
}


@pytest.fixture(scope="module")
def char_exports(shared_data, tmp_path_factory) -> dict[str, tuple]:
    """Per character-level dataset: (our export of a random model over the bytes of its real
    text, as txl-generate reads it; the Hugging Face export of the same model and data)."""
    exports = {}
    for dataset in CHAR_PROMPTS:
        tmp = tmp_path_factory.mktemp(dataset)
        text = getattr(pi, f"{dataset}_bytes")(shared_data)
        ours, _ = char_model_dir(tmp, dataset, text, init_std=0.5)  # peaked: greedy varies

        def data_files(directory: str, ours=ours) -> None:
            for name in (VOCAB_FILE, DATA_FILE):
                shutil.copy(ours / name, directory)

        save_hf(TransformerXL.from_pretrained(ours), str(tmp / "hf"), data_files)
        exports[dataset] = ours, tmp / "hf"
    return exports


@pytest.mark.parametrize("dataset", sorted(CHAR_PROMPTS))
def test_a_char_level_tokenizer_reads_text_as_txl_generate_does(
    char_exports, dataset, shared_data, monkeypatch
):
    """No remote code: a token per byte of the dataset's normalized text (enwik8 without line
    breaks, text8 stripped), the ids of vocab.txt; the padding token lies past them."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours, exported = char_exports[dataset]
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    words = ExportText(str(ours))
    real = getattr(pi, f"{dataset}_bytes")(shared_data)[:3000].decode("utf-8", "ignore")
    for text in [*CHAR_PROMPTS[dataset], real]:
        ids = tokenizer(text)["input_ids"]
        assert ids == words.encode(text)[0].tolist()
        assert tokenizer.decode(ids) == words.decode(ids)
    assert any(ord(c) > 127 for c in real) == (dataset == "enwik8")  # bytes of a character
    n_token = len(words.vocab)
    assert tokenizer.pad_token == "<pad>" and tokenizer.pad_token_id == n_token
    assert tokenizer.eos_token is None  # no document ends in enwik8 or text8
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation == {"pad_token_id": n_token}
    with pytest.raises(Exception, match="Missing \\[UNK\\]"):  # as ours refuses it
        tokenizer("\x00")
    if dataset == "enwik8":  # the padding token's name is read as text, as ours reads it
        assert tokenizer("<pad>")["input_ids"] == words.encode("<pad>")[0].tolist()


@pytest.mark.parametrize("dataset", sorted(CHAR_PROMPTS))
def test_a_char_level_pipeline_and_padded_batch_generate_as_txl_generate_does(
    char_exports, dataset, monkeypatch, capsys
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours, exported = char_exports[dataset]
    pipe = transformers.pipeline("text-generation", model=str(exported), trust_remote_code=True)
    prompts, steps = CHAR_PROMPTS[dataset], 12
    for prompt in prompts:
        argv = ["--model", str(ours), "--prompt", prompt, "--temperature", "0", "--json"]
        assert txl_generate.main([*argv, "--max-tokens", str(steps)]) == 0
        expected = json.loads(capsys.readouterr().out)["text"]
        got = pipe(prompt, max_new_tokens=steps, do_sample=False, return_full_text=False)
        assert got[0]["generated_text"] == expected

    batch = pipe.tokenizer(prompts, padding=True, return_tensors="pt")  # left, with <pad>
    assert (batch.input_ids == pipe.tokenizer.pad_token_id).any()
    alone = [ExportText(str(ours)).prompt(p).tolist() for p in prompts]
    model = TransformerXL.from_pretrained(ours)
    ev = model.config.for_eval()  # as txl-generate runs it
    model.set_lengths(mem_len=ev.mem_len, clamp_len=ev.clamp_len, same_length=False)
    assert_batched_is_each_alone(
        model, pipe.model.eval(), alone, batch.input_ids, batch.attention_mask, steps
    )
