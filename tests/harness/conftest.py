"""A freshly initialised word-level model exported with a vocabulary of real WikiText-103 text,
and harness tasks defined locally over JSONL files of that text; the harness runs offline."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from data_pipeline.vocab import EOS, UNK_WIKI, Vocab
from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.pretrained import VOCAB_FILE

LINES = 40
"""Lines of wiki.valid.tokens the tests read (about 4,000 words, headings and blank lines too)."""


@pytest.fixture(scope="session")
def wiki_lines(shared_data) -> list[str]:
    """The first LINES lines of WikiText-103's valid split, line breaks removed."""
    with open(shared_data / "wikitext-103" / "wiki.valid.tokens", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(LINES)]


@pytest.fixture(scope="session")
def model_dir(wiki_lines, tmp_path_factory) -> Path:
    """A random model over the words seen twice in the first half of the lines (so the rest has
    words it lacks), saved as txl-export writes it."""
    counts = Counter(w for line in wiki_lines[: LINES // 2] for w in line.split())
    words = [w for w, n in counts.items() if n >= 2]
    vocab = Vocab.build(words, [counts[w] for w in words], specials=[EOS, UNK_WIKI])
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=len(vocab), n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
        cutoffs=[40], div_val=2, tgt_len=8, mem_len=8, eval_tgt_len=32, eval_mem_len=40,
        eval_clamp_len=36, eval_same_length=True, dropout=0.0, init_std=0.3,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("harness") / "model"
    TransformerXL(config).save_pretrained(out)
    vocab.save(str(out / VOCAB_FILE))
    return out


@pytest.fixture(scope="session")
def offline_harness(tmp_path_factory):
    """The harness and its datasets library with the network off and their caches in tmp."""
    import datasets

    with pytest.MonkeyPatch.context() as env:
        for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            env.setenv(name, "1")
        env.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        env.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
        yield


def write_task(tasks: Path, name: str, docs: list[dict], task: str) -> None:
    """tasks/NAME.yaml over tasks/NAME.jsonl (the `docs`): `task` is the YAML after its data."""
    data = tasks / f"{name}.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    cache = tasks / "cache"
    header = (
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\n  cache_dir: {cache}\ntest_split: test\n"
    )
    (tasks / f"{name}.yaml").write_text(header + task)


ROLLING = """\
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""

LAST_WORD = """\
output_type: loglikelihood
doc_to_text: "{{text.split(' ')[:-1]|join(' ')}}"
doc_to_target: "{{' '+text.split(' ')[-1]}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def rolling_docs(wiki_lines: list[str]) -> list[str]:
    """Two documents of whole lines, each ending in a line break (read as <eos>)."""
    half = LINES // 2
    return [
        "".join(f"{line}\n" for line in part) for part in (wiki_lines[:half], wiki_lines[half:])
    ]


def last_word_docs(wiki_lines: list[str]) -> list[str]:
    """Passages of up to 30 words, one per paragraph (the lines that are no heading)."""
    lines = [line.split() for line in wiki_lines if line.strip() and not line.startswith(" =")]
    return [" ".join(words[:30]) for words in lines]


@pytest.fixture(scope="session")
def tasks(wiki_lines, tmp_path_factory) -> Path:
    """A directory of two harness tasks: wt103_rolling (perplexity) and wt103_last_word (cloze)."""
    out = tmp_path_factory.mktemp("tasks")
    rolling = [{"text": doc} for doc in rolling_docs(wiki_lines)]
    write_task(out, "wt103_rolling", rolling, ROLLING)
    write_task(out, "wt103_last_word", [{"text": t} for t in last_word_docs(wiki_lines)], LAST_WORD)
    return out


def reference_loglikelihood(model: TransformerXL, model_dir: Path, context: str, word: str):
    """log P(word | <eos> context) from our model's losses: the context's inputs run through
    the memory segment by segment, then the word's tokens scored on it (read independently
    of txl_dist.harness: the words of vocab.txt, <eos> first)."""
    vocab = Vocab.load(str(model_dir / VOCAB_FILE))
    context_ids = vocab.encode([EOS, *context.split()]).tolist()
    ids = torch.tensor(context_ids + vocab.encode(word.split()).tolist())
    tgt_len, mems = model.config.tgt_len, None
    with torch.no_grad():
        context_inputs = ids[: len(context_ids) - 1]
        for segment in context_inputs.split(tgt_len) if len(context_inputs) else ():
            mems = model(segment[None], mems=mems).mems
        inputs, targets = ids[len(context_ids) - 1 : -1], ids[len(context_ids) :]
        nll = 0.0
        for x, y in zip(inputs.split(tgt_len), targets.split(tgt_len)):
            out = model(x[None], y[None], mems)
            nll, mems = nll + out.loss.double().sum().item(), out.mems
    return -nll
