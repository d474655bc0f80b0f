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
from tokenizers import Tokenizer

from data_pipeline import DATASETS
from data_pipeline.corpora.encoding import in_vocab
from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.vocab import Vocab
from tests.cli.test_generate import char_model_dir
from tests.data_pipeline import paper_inputs as pi
from tests.data_pipeline.corpora.test_subword import renamed_end_token
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli import evaluate as txl_eval
from txl_dist.cli import generate as txl_generate
from txl_dist.exports.generation import Sampling, generate
from txl_dist.exports.loading import DATA_FILE, load_for_evaluation
from txl_dist.exports.text import ExportText
from txl_dist.hf.export import save_hf
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.pretrained import VOCAB_FILE

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


def shard_ids(text: str, vocab: Vocab) -> list[int]:
    """The ids txl-prepare writes into the shards for `text`, a file of WikiText lines."""
    data = text.encode()
    words = DATASETS["wikitext-103"].documents.tokenization
    return in_vocab(words.encode(data, "text", 0, len(data), vocab), vocab).ids.tolist()


def test_auto_tokenizer_reads_text_as_the_data_was_prepared(hf_words_dir, tmp_path, monkeypatch):
    """No remote code: tokenizer.json is a WordLevel model over vocab.txt that reads text as
    txl-prepare did (a line break, \\r included, is <eos>, \\x1f parts words, "<eos>" inside a
    word is part of it, an unknown word <unk>), after the <eos> txl-generate starts with."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_words_dir, trust_remote_code=False)
    text = "w2 w7  w3\nw9 nope\n"
    WORDS.save(str(tmp_path / VOCAB_FILE))  # a plain export's vocabulary, as our commands read it
    assert tokenizer(text)["input_ids"] == [0, *ExportText(str(tmp_path)).encode(text)[0].tolist()]
    odd = "w2<eos>w3 w4\rw5 w6\x1fw7 w8<unk> <unk> <eos> w9\r\nw10 w11\x1cw12\n"
    assert tokenizer(odd, add_special_tokens=False)["input_ids"] == shard_ids(odd, WORDS)
    assert tokenizer.eos_token == tokenizer.pad_token == tokenizer.bos_token == "<eos>"
    assert tokenizer.unk_token == "<unk>"
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == "w2 w7 w3 w9"
    generation = json.loads((hf_words_dir / "generation_config.json").read_text())
    assert generation == {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}


def test_the_tokenizer_loads_without_running_the_directory_s_code(hf_words_dir, tmp_path):
    """AutoTokenizer reads config.json first, which names configuration_txl.py: with
    trust_remote_code=False (or PreTrainedTokenizerFast) that code never runs, and the
    tokenizer is the same."""
    planted = tmp_path / "txl-hf"
    shutil.copytree(hf_words_dir, planted)
    marker = tmp_path / "ran"
    code = (planted / "configuration_txl.py").read_text()
    (planted / "configuration_txl.py").write_text(f"{code}\nopen({str(marker)!r}, 'w')\n")
    read = [
        transformers.AutoTokenizer.from_pretrained(planted, trust_remote_code=False),
        transformers.PreTrainedTokenizerFast.from_pretrained(planted),
    ]
    assert [t("w3 w4")["input_ids"] for t in read] == [[0, 3, 4]] * 2
    assert not marker.exists()
    transformers.AutoConfig.from_pretrained(planted, trust_remote_code=True)
    assert marker.exists()  # the planted line would have shown it


def txl_generate_json(capsys, model_dir, prompt: str, steps: int) -> dict:
    """txl-generate --temperature 0 --json's report for `prompt`."""
    argv = ["--model", str(model_dir), "--prompt", prompt, "--temperature", "0", "--json"]
    assert txl_generate.main([*argv, "--max-tokens", str(steps)]) == 0
    return json.loads(capsys.readouterr().out)


def test_pipeline_generates_what_txl_generate_does_and_stops_at_the_end_token(
    ours, hf_words_dir, tmp_path, monkeypatch, capsys
):
    """From a prompt as transformers users give it: the ids txl-generate continues (after
    <eos>) and its greedy tokens, up to the <eos> where generate() stops."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours.save_pretrained(tmp_path / "txl", write_extra=lambda d: WORDS.save(f"{d}/{VOCAB_FILE}"))
    pipe = transformers.pipeline("text-generation", model=str(hf_words_dir), trust_remote_code=True)
    steps, prompt = 16, "w3 w17 w25 w4 w9"
    got = pipe(prompt, max_new_tokens=steps, do_sample=False, return_full_text=False)
    expected = txl_generate_json(capsys, tmp_path / "txl", prompt, steps)
    ids = expected["ids"]
    assert 0 in ids and len(set(ids)) > 2  # ours goes on past <eos> (id 0), with some variety
    ended = ids[: ids.index(0)]
    inputs = pipe.tokenizer(prompt, return_tensors="pt")
    assert inputs.input_ids[0].tolist() == expected["prompt_ids"]
    with torch.no_grad():  # generate() alone stops there too, by generation_config.json
        alone = pipe.model.generate(**inputs, max_new_tokens=steps, do_sample=False)
    assert alone[0, inputs.input_ids.size(1) :].tolist() == [*ended, 0]
    assert got[0]["generated_text"].split() == [w for w in WORDS.decode(ended) if w != "<unk>"]


@pytest.mark.parametrize("end", ["<|endoftext|>", "<|doc end: 1|>"])
def test_a_subword_export_starts_and_ends_documents_at_its_end_token_as_txl_generate(
    end, tmp_path, monkeypatch, capsys
):
    """The end token is the one data.json names (txl-export records the data's, of any name:
    txl-prepare --eos-token; an export without that record takes the tokenizer's own): the
    tokenizer puts it before a prompt, as txl-generate does and every training document
    follows it, and generate() and pipeline stop at it, token for token txl-generate's."""
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

    def tokenizer_files(directory: str) -> None:
        (Path(directory) / TOKENIZER_FILE).write_text(tokenizer_json)
        if end != subword.eos:
            (Path(directory) / DATA_FILE).write_text(json.dumps({"eos_token": end}))

    save_hf(model, str(tmp_path / "txl-hf"), tokenizer_files)
    model.save_pretrained(tmp_path / "txl", write_extra=tokenizer_files)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pipe = transformers.pipeline(
        "text-generation", model=str(tmp_path / "txl-hf"), trust_remote_code=True
    )
    tokenizer = pipe.tokenizer
    assert tokenizer.eos_token == tokenizer.bos_token == tokenizer.pad_token == end
    generation = json.loads((tmp_path / "txl-hf" / "generation_config.json").read_text())
    assert generation == {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    steps, prompt = 40, "the cat"
    expected = txl_generate_json(capsys, tmp_path / "txl", prompt, steps)
    assert expected["prompt_ids"] == [0, *subword.encode(prompt)]
    assert 0 < len(expected["ids"]) < steps  # ours stopped at the token: so does generate()
    inputs = tokenizer(prompt, return_tensors="pt")
    assert inputs.input_ids[0].tolist() == expected["prompt_ids"]
    with torch.no_grad():
        alone = pipe.model.eval().generate(**inputs, max_new_tokens=steps, do_sample=False)
    assert alone[0, inputs.input_ids.size(1) :].tolist() == [*expected["ids"], 0]
    got = pipe(prompt, max_new_tokens=steps, do_sample=False)
    assert got[0]["generated_text"] == prompt + expected["text"]  # the end token not shown


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
    for prompt in prompts:  # nothing before a prompt: char-level data has no end token
        expected = txl_generate_json(capsys, ours, prompt, steps)
        got = pipe(prompt, max_new_tokens=steps, do_sample=False, return_full_text=False)
        assert got[0]["generated_text"] == expected["text"]
        inputs = pipe.tokenizer(prompt, return_tensors="pt")
        assert inputs.input_ids[0].tolist() == expected["prompt_ids"]
        with torch.no_grad():
            drawn = pipe.model.generate(**inputs, max_new_tokens=steps, do_sample=False)
        assert drawn[0, inputs.input_ids.size(1) :].tolist() == expected["ids"]

    batch = pipe.tokenizer(prompts, padding=True, return_tensors="pt")  # left, with <pad>
    assert (batch.input_ids == pipe.tokenizer.pad_token_id).any()
    alone = [ExportText(str(ours)).prompt(p).tolist() for p in prompts]
    model = TransformerXL.from_pretrained(ours)
    ev = model.config.for_eval()  # as txl-generate runs it
    model.set_lengths(mem_len=ev.mem_len, clamp_len=ev.clamp_len, same_length=False)
    assert_batched_is_each_alone(
        model, pipe.model.eval(), alone, batch.input_ids, batch.attention_mask, steps
    )


def test_our_commands_name_a_hugging_face_export_for_what_it_is(hf_words_dir, tmp_path, capsys):
    """txl-generate and txl-eval (--text, --data, --tasks) given an HF export: one line saying
    what it is and what to pass instead, not its config.json's unknown keys."""
    text = tmp_path / "text.txt"
    text.write_text("w3 w4\n")
    runs = {
        "txl-generate": lambda: txl_generate.main(["--model", str(hf_words_dir), "--prompt", "w3"]),
        "txl-eval": lambda: txl_eval.main(["--model", str(hf_words_dir), "--text", str(text)]),
    }
    for name, run in runs.items():
        assert run() == USAGE_ERROR
        assert capsys.readouterr().err == (
            f"{name}: error: {hf_words_dir} is a Hugging Face export (txl-export --format hf): "
            "load it with transformers (AutoModelForCausalLM.from_pretrained(DIR, "
            "trust_remote_code=True)), or pass a txl-export directory (txl-export without "
            "--format hf)\n"
        )
    with pytest.raises(ValueError, match="is a Hugging Face export"):  # the harness's way in
        load_for_evaluation(str(hf_words_dir), torch.device("cpu"))


def test_a_subword_export_encodes_whole_whatever_its_tokenizer_json_says(tmp_path, monkeypatch):
    """A tokenizer.json saved with truncation and padding on (common) and a post-processor
    that adds tokens: txl-prepare encoded without them, and so does the exported tokenizer
    (the end token before the text its only addition)."""
    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n", "a dog sat\n"] * 20))
    spec = json.loads(subword.json_text)
    spec["truncation"] = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst",
                          "stride": 0}  # fmt: skip
    spec["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 1, "pad_type_id": 0, "pad_token": "x"}  # fmt: skip
    spec["post_processor"] = {"type": "BertProcessing", "sep": ["a", 1], "cls": ["b", 2]}
    config = TXLConfig(n_token=len(subword), n_layer=1, n_head=2, d_model=8, d_head=4)

    def tokenizer_files(directory: str) -> None:
        (Path(directory) / TOKENIZER_FILE).write_text(json.dumps(spec))

    save_hf(TransformerXL(config), str(tmp_path / "txl-hf"), tokenizer_files)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(tmp_path / "txl-hf")
    text = "the cat sat on the mat"
    assert tokenizer(text)["input_ids"] == [0, *subword.encode(text)]
    library = Tokenizer.from_file(str(tmp_path / "txl-hf" / TOKENIZER_FILE))  # used alone
    assert library.encode(text).ids == [0, *subword.encode(text)]
