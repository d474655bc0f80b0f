"""TXLM's requests against our model: a continuation's log-likelihood is the sum of our per-token
losses after the context ran through the memory, however the requests are batched; generation
is txl-generate's; words the vocabulary lacks are said once; one rank only."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance

from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.vocab import Vocab
from tests.harness.conftest import reference_loglikelihood
from txl_dist.cli.evaluate import main as txl_eval
from txl_dist.cli.generate import main as txl_generate
from txl_dist.harness import TXLM
from txl_dist.model import TransformerXL, TXLConfig


def requests(kind: str, *args: tuple) -> list[Instance]:
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


@pytest.fixture(scope="module")
def lm(model_dir) -> TXLM:
    return TXLM(str(model_dir), batch_size=3, device="cpu")


def test_a_continuation_scores_our_losses_after_its_context_batched_or_not(
    lm, model_dir, wiki_lines
):
    words = " ".join(wiki_lines[3:6]).split()
    pairs = [
        (" ".join(words[:50]), " " + " ".join(words[50:53])),  # two continuations of a context
        (" ".join(words[:50]), " " + " ".join(words[50:120])),  # longer than a segment
        (" ".join(words[10:60]), " " + words[60]),  # another context of the same length
        (" ".join(words[:7]), " " + words[7]),  # within the first segment
        ("", " ".join(words[:5])),  # no context: after the line start alone
    ]
    scored = lm.loglikelihood(requests("loglikelihood", *pairs), disable_tqdm=True)
    expected = [reference_loglikelihood(lm.model, model_dir, c, w) for c, w in pairs]
    assert [ll for ll, _ in scored] == pytest.approx(expected, rel=1e-5, abs=1e-4)
    one_by_one = [
        lm.loglikelihood(requests("loglikelihood", p), disable_tqdm=True)[0] for p in pairs
    ]
    assert [ll for ll, _ in one_by_one] == pytest.approx(expected, rel=1e-5, abs=1e-4)

    # is_greedy: true exactly for the continuation our model would pick itself
    vocab = Vocab.load(str(model_dir / "vocab.txt"))
    context = " ".join(words[:20])
    ids = torch.tensor(lm.encode_pair(context, "")[0])
    with torch.no_grad():
        log_probs = lm.model(ids[None, -lm.model.config.tgt_len :]).log_probs[0, -1]
    likely, unlikely = (vocab.tokens[int(i)] for i in (log_probs.argmax(), log_probs.argmin()))
    greedy = lm.loglikelihood(
        requests("loglikelihood", (context, f" {likely}"), (context, f" {unlikely}")), True
    )
    assert [g for _, g in greedy] == [True, False]


def test_generation_is_txl_generates_and_stops_at_until(lm, model_dir, capsys):
    prompt = "The European lobster is"
    argv = ["--model", model_dir, "--prompt", prompt, "--max-tokens", 12, "--temperature", 0]
    assert txl_generate([str(a) for a in [*argv, "--device", "cpu"]]) == 0
    expected = capsys.readouterr().out.removeprefix(prompt).removesuffix("\n")
    (text,) = lm.generate_until(requests("generate_until", (prompt, {"max_gen_toks": 12})), True)
    assert text == expected and text.count(" ") >= 6
    stop = expected.split()[3]
    (cut,) = lm.generate_until(requests("generate_until", (prompt, {"until": [stop]})), True)
    assert cut == expected[: expected.index(stop)]


def test_unknown_words_are_read_as_unknown_and_said_once(model_dir, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("txl_dist"), "propagate", True)  # to caplog
    lm = TXLM(str(model_dir))
    unk = lm.text.vocab.index["<unk>"]
    assert lm.encode("lobster zzqx\nthe") == [*lm.encode("lobster"), unk, lm.text.start[0],
                                              *lm.encode("the")]  # fmt: skip
    lm.encode("qqzz")
    said = [r.getMessage() for r in caplog.records if "vocabulary lacks" in r.getMessage()]
    assert len(said) == 1 and "'zzqx'" in said[0]


def test_it_runs_on_one_rank(model_dir, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="one rank"):
        TXLM(str(model_dir))


@pytest.fixture(scope="module")
def subword_dir(tmp_path_factory, wiki_lines) -> Path:
    """A random model over a BPE with an end-of-text token, drawn often (its bias raised)."""
    subword = Subword.train_bpe(400, iter(wiki_lines))
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(subword), n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, cutoffs=[],
        tgt_len=8, mem_len=8, eval_tgt_len=64, eval_mem_len=64, dropout=0.0, init_std=0.3,
    )  # fmt: skip
    model = TransformerXL(config).eval()
    with torch.no_grad():
        model.crit.out_layers[0].bias[subword.eos_id] = 3.0
    out = tmp_path_factory.mktemp("harness-subword") / "model"
    model.save_pretrained(out)
    subword.save(str(out / TOKENIZER_FILE))
    return out


def test_a_subword_document_is_scored_after_its_boundary_and_generation_stops_at_it(
    subword_dir, wiki_lines
):
    lm = TXLM(str(subword_dir), batch_size=2, device="cpu")
    subword = Subword.load(str(subword_dir / TOKENIZER_FILE))
    document = " ".join(wiki_lines[3].split()[:12])
    ids = [subword.eos_id, *subword.encode(document)]  # a document starts after the token
    assert len(ids) <= lm.model.config.tgt_len  # one segment: one forward is the reference
    with torch.no_grad():
        out = lm.model(torch.tensor([ids[:-1]]), torch.tensor([ids[1:]]))
    (rolling,) = lm.loglikelihood_rolling(requests("loglikelihood_rolling", (document,)), True)
    assert rolling == pytest.approx(-out.loss.double().sum().item(), rel=1e-5)
    (text,) = lm.generate_until(
        requests("generate_until", (document, {"max_gen_toks": 300, "do_sample": True})), True
    )
    assert "<|endoftext|>" not in text and len(subword.encode(text)) < 300


def test_txl_eval_scores_a_text_file_as_the_harness_scores_a_document(
    subword_dir, wiki_lines, tmp_path, capsys
):
    """txl-eval --text FILE on subword data: one document after the end-of-text token, every
    token of the file scored (the first too), as a rolling request and a training document."""
    document = "".join(line + "\n" for line in wiki_lines[:30])  # segments of eval_tgt_len
    (tmp_path / "doc.txt").write_text(document, encoding="utf-8")
    argv = ["--model", str(subword_dir), "--text", str(tmp_path / "doc.txt"), "--batch-size", "1"]
    assert txl_eval([*argv, "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    lm = TXLM(str(subword_dir), batch_size=1, device="cpu")
    assert report["tokens"] == len(lm.encode(document)) > 2 * lm.model.config.tgt_len
    (rolling,) = lm.loglikelihood_rolling(requests("loglikelihood_rolling", (document,)), True)
    assert -report["loss"] * report["tokens"] == pytest.approx(rolling, rel=1e-5)
