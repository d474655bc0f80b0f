"""txl-generate: memory instead of re-running the context, sampling filters, reproducibility."""

from __future__ import annotations

import json

import pytest
import torch

from data_pipeline.corpora.datasets import DATASETS
from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.vocab import Vocab
from tests.data_pipeline import paper_inputs as pi
from txl_dist.cli import USAGE_ERROR
from txl_dist.cli.generate import main
from txl_dist.exports.generation import CharDetokenizer, Sampling, generate, prompt_ids
from txl_dist.model import TransformerXL, TXLConfig

VOCAB = Vocab(["<eos>", "<unk>", *(f"w{i}" for i in range(98))])


def small_model(mem_len: int = 64) -> TransformerXL:
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(VOCAB), n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
        cutoffs=[30, 60], div_val=2, tie_projs=[False, True, True], tgt_len=8, mem_len=mem_len,
        eval_mem_len=mem_len, clamp_len=-1, dropout=0.0,
    )  # fmt: skip
    return TransformerXL(config).eval()


@pytest.fixture
def model_dir(tmp_path):
    small_model().save_pretrained(tmp_path)
    VOCAB.save(str(tmp_path / "vocab.txt"))
    return tmp_path


def test_memory_gives_the_distribution_of_a_full_rerun():
    model = small_model(mem_len=64)
    prompt = torch.randint(0, len(VOCAB), (10,), generator=torch.Generator().manual_seed(1))
    context = prompt.tolist()
    steps = generate(model, prompt, 30, Sampling(), torch.Generator().manual_seed(0))
    for token, log_probs in steps:  # the context (at most 40 tokens) fits in the memory
        full = model(torch.tensor([context])).log_probs[0, -1]
        torch.testing.assert_close(log_probs, full, rtol=0, atol=1e-5)
        context.append(token)


def test_each_new_token_costs_one_step_of_length_one():
    model = small_model()
    lengths = []
    model.register_forward_pre_hook(lambda _, args: lengths.append(args[0].shape))
    prompt = torch.arange(2, 9)
    tokens = list(generate(model, prompt, 5, Sampling(), torch.Generator().manual_seed(0)))
    assert len(tokens) == 5
    assert lengths == [torch.Size([1, 7])] + [torch.Size([1, 1])] * 4


def test_filters_keep_only_the_likely_tokens():
    log_probs = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    torch.testing.assert_close(Sampling().probabilities(log_probs), log_probs.exp())
    assert Sampling(top_k=2).probabilities(log_probs).tolist() == pytest.approx(
        [0.625, 0.375, 0, 0]
    )
    # 0.5 + 0.3 reach 0.7: the third token is not needed
    assert Sampling(top_p=0.7).probabilities(log_probs).tolist() == pytest.approx(
        [0.625, 0.375, 0, 0]
    )
    assert Sampling(top_p=0.5).probabilities(log_probs).tolist() == pytest.approx([1, 0, 0, 0])
    cold = Sampling(temperature=0.5).probabilities(log_probs)
    assert cold[0] == pytest.approx(0.25 / (0.25 + 0.09 + 0.0225 + 0.0025))
    greedy = Sampling(temperature=0)
    assert {greedy.draw(log_probs, torch.Generator()) for _ in range(5)} == {0}
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0)


def test_prompt_starts_a_line_and_unknown_words_become_unk():
    assert prompt_ids("w3 never-seen w5", VOCAB).tolist() == [0, 5, 1, 7]


def test_same_seed_same_text_streamed(model_dir, capsys):
    args = ["--model", str(model_dir), "--prompt", "w1 w2", "--max-tokens", "40", "--top-p", "0.9"]
    assert main([*args, "--seed", "3"]) == 0
    first = capsys.readouterr().out
    assert main([*args, "--seed", "3"]) == 0
    assert capsys.readouterr().out == first
    assert main([*args, "--seed", "4"]) == 0
    assert capsys.readouterr().out != first
    assert first.startswith("w1 w2") and " \n" not in first and "\n " not in first
    eos_tokens = first.count("\n") - 1  # each <eos> prints a line break, and a final one
    assert len(first.split()) == 2 + 40 - eos_tokens


def test_missing_vocabulary_is_a_clear_error(model_dir, capsys):
    (model_dir / "vocab.txt").unlink()
    assert main(["--model", str(model_dir), "--prompt", "w1"]) == USAGE_ERROR
    assert "no vocab.txt" in capsys.readouterr().err


def test_tokens_with_terminal_escapes_are_printed_escaped(tmp_path, capsys):
    small_model().save_pretrained(tmp_path)
    # Retitle the terminal, clear it, ring its bell; a right-to-left override reorders text.
    tokens = ["<eos>", *(f"\x1b]0;owned\x07\x1b[2J\u202e{i}" for i in range(99))]
    Vocab(tokens).save(str(tmp_path / "vocab.txt"))
    assert main(["--model", str(tmp_path), "--prompt", "", "--max-tokens", "20"]) == 0
    out = capsys.readouterr().out
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202e" in out
    assert not any(c in out for c in "\x1b\x07\u202e")


# ---- character-level models ----


def char_model_dir(tmp_path, dataset: str, text: bytes, **config):
    """A random full-softmax model over the characters of ``text`` (``config``: TXLConfig
    fields changed), exported as txl-export writes a character-level model (vocab.txt in
    txl-prepare's tokens, data.json)."""
    names, _ = DATASETS[dataset].char_tokenizer.tokens(text, "text")
    vocab = Vocab(names)
    torch.manual_seed(0)
    settings = dict(
        n_token=len(vocab), n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, tgt_len=8,
        mem_len=16, dropout=0.0,
    )  # fmt: skip
    out = tmp_path / dataset
    TransformerXL(TXLConfig(**settings | config)).save_pretrained(out)
    vocab.save(str(out / "vocab.txt"))
    (out / "data.json").write_text(json.dumps({"dataset": dataset, "level": "char"}))
    return out, vocab


def test_an_enwik8_prompt_is_its_bytes_and_output_is_utf8_text(shared_data, tmp_path, capsys):
    text = pi.enwik8_bytes(shared_data)
    model_dir, vocab = char_model_dir(tmp_path, "enwik8", text)
    prompt = "The café\nis"
    ids = prompt_ids(prompt, vocab, "enwik8")
    assert vocab.decode(ids) == [str(b) for b in prompt.encode() if b != ord("\n")]
    words = CharDetokenizer("enwik8")
    assert "".join(words.text(t) for t in vocab.decode(ids)) == prompt.replace("\n", "")
    assert main(["--model", str(model_dir), "--prompt", prompt, "--max-tokens", "30"]) == 0
    model = TransformerXL.from_pretrained(str(model_dir))
    model.set_lengths(mem_len=16, same_length=False)
    drawn = generate(model, ids, 30, Sampling(), torch.Generator().manual_seed(0))
    words = CharDetokenizer("enwik8")
    new = "".join(words.text(vocab.tokens[t]) for t, _ in drawn)
    assert capsys.readouterr().out == prompt + new + "\n"
    assert main(["--model", str(model_dir), "--max-tokens", "3"]) == USAGE_ERROR
    assert "needs a --prompt" in capsys.readouterr().err


def test_a_text8_model_prints_characters_and_refuses_others(shared_data, tmp_path, capsys):
    model_dir, vocab = char_model_dir(tmp_path, "text8", pi.text8_bytes(shared_data))
    assert vocab.decode(prompt_ids("of the", vocab, "text8")) == list("of_the")
    assert main(["--model", str(model_dir), "--prompt", "of the", "--max-tokens", "40"]) == 0
    out = capsys.readouterr().out
    assert len(out) == len("of the") + 40 + 1 and set(out[:-1]) <= set(
        " abcdefghijklmnopqrstuvwxyz"
    )
    assert main(["--model", str(model_dir), "--prompt", "Of the"]) == USAGE_ERROR
    assert "--prompt: byte 0 is b'O'" in capsys.readouterr().err
    (model_dir / "data.json").write_text(json.dumps({"dataset": "ptb-char", "level": "char"}))
    assert main(["--model", str(model_dir), "--prompt", "of"]) == USAGE_ERROR
    assert "character-level model of 'ptb-char'" in capsys.readouterr().err


def test_a_subword_model_stops_at_its_end_of_text_token(tmp_path, capsys):
    tmp_path = tmp_path / "export"
    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n"] * 20))
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(subword), n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, cutoffs=[],
        tgt_len=8, mem_len=16, eval_mem_len=16, dropout=0.0,
    )  # fmt: skip
    model = TransformerXL(config).eval()
    with torch.no_grad():  # the end-of-text token likely: drawn within a few tokens
        model.crit.out_layers[0].bias[subword.eos_id] = 4.0
    model.save_pretrained(tmp_path)
    subword.save(str(tmp_path / TOKENIZER_FILE))
    args = ["--model", str(tmp_path), "--prompt", "the cat", "--max-tokens", "200", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["prompt_ids"][0] == subword.eos_id == 0  # the prompt starts a document
    assert report["stopped"] == "eos" and 0 < len(report["ids"]) < 200
    assert subword.eos_id not in report["ids"] and report["text"] == subword.decode(report["ids"])
    assert main(args[:-1]) == 0
    out, err = capsys.readouterr()
    assert out == "the cat" + report["text"] + "\n"
    assert err == "txl-generate: stopped at <|endoftext|>, the end of a document\n"
