"""Small real-text datasets whose vocabulary has a shipped config's full size.

The shared corpora have far fewer word types than WikiText-103 (267,735) or One Billion Word
(793,471). To train a config as shipped, the vocabulary is padded to its `n_token` with unused
tokens. Frequent words fill the head cluster and a few rare words sit in every tail cluster, so,
as on real data, most targets are head tokens, the tail code runs at its real size, and which
clusters a micro-batch touches differs from rank to rank.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from data_pipeline.cli import main as prepare_main

# Training text for 3 steps of 2 rows per rank at the largest tgt_len (384), and a valid split
# (~530 tokens) that 2 evaluation rows cover in 2 or more segments each at every config's eval
# tgt_len (128 the largest), so evaluation carries its memory. A real-size evaluation is slow
# on a CPU (lm1b_base: ~13 tokens/s under load), and its cost grows with this split: One
# Billion Word's (eval tgt_len 32, mem_len 128) is ~360 tokens, 5 segments a row, so its
# memory still reaches its full length.
TRAIN_WORDS = 12_000
VALID_WORDS = 500
LM1B_VALID_WORDS = 310
TAIL_WORDS = 20  # rare words per tail cluster: few targets, on some ranks and not others


def spread_vocabulary(
    words: list[str], specials: list[str], n_token: int, cutoffs: list[int]
) -> list[str]:
    """`n_token` entries: specials and frequent words in the head cluster, as on real data, and
    the rarest `TAIL_WORDS` words in each tail cluster, spread over its whole id range."""
    counts = Counter(words)
    ordered = [w for w, _ in counts.most_common() if w not in specials]
    tails = list(zip([*cutoffs], [*cutoffs[1:], n_token]))
    head_words, rare = ordered[: -TAIL_WORDS * len(tails)], ordered[-TAIL_WORDS * len(tails) :]
    assert len(specials) + len(head_words) <= cutoffs[0]
    vocab = [*specials, *head_words]
    vocab += [f"<pad{i}>" for i in range(len(vocab), n_token)]
    for t, (start, end) in enumerate(tails):
        stride = (end - start) // TAIL_WORDS
        for k, word in enumerate(rare[t * TAIL_WORDS : (t + 1) * TAIL_WORDS]):
            vocab[start + k * stride] = word
    return vocab


def take_lines(path: Path, max_words: int) -> list[str]:
    """Whole lines from the start of `path` until `max_words` words are reached."""
    lines, words = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if words >= max_words:
                break
            lines.append(line)
            words += len(line.split())
    return lines


def wikitext_real_size(shared_data: Path, out: Path, n_token: int, cutoffs: list[int]) -> Path:
    """WikiText-103 train-prefix and valid articles, vocabulary padded to `n_token`."""
    source = out / "source"
    source.mkdir(parents=True)
    train = take_lines(shared_data / "wikitext-103" / "wiki.train.tokens", TRAIN_WORDS)
    valid = take_lines(shared_data / "wikitext-103" / "wiki.valid.tokens", VALID_WORDS)
    (source / "wiki.train.tokens").write_text("".join(train))
    (source / "wiki.valid.tokens").write_text("".join(valid))
    words = [w for line in train + valid for w in line.split()]
    vocab = spread_vocabulary(words, ["<eos>"], n_token, cutoffs)
    return _prepare("wikitext-103", source, out, vocab)


def lm1b_real_size(shared_data: Path, out: Path, n_token: int, cutoffs: list[int]) -> Path:
    """One Billion Word held-out sentences as train and valid, vocabulary padded to `n_token`."""
    source = out / "source"
    source.mkdir(parents=True)
    lines = take_lines(
        shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1",
        TRAIN_WORDS + LM1B_VALID_WORDS,
    )
    cut = len(lines) * TRAIN_WORDS // (TRAIN_WORDS + LM1B_VALID_WORDS)
    (source / "news.en-00001-of-00100").write_text("".join(lines[:cut]))
    (source / "news.en.heldout-00000-of-00050").write_text("".join(lines[cut:]))
    words = [w for line in lines for w in line.split()]
    vocab = spread_vocabulary(words, ["<S>", "<UNK>"], n_token, cutoffs)
    return _prepare("lm1b", source, out, vocab)


def _prepare(dataset: str, source: Path, out: Path, vocab: list[str]) -> Path:
    vocab_file = out / "vocab-in.txt"
    vocab_file.write_text("".join(f"{token} 1\n" for token in vocab))
    data = out / "data"
    args = ["--dataset", dataset, "--source", str(source), "--out", str(data)]
    assert prepare_main([*args, "--vocab", str(vocab_file), "--no-progress"]) == 0
    manifest = json.loads((data / "train" / "manifest.json").read_text())
    assert manifest["vocab_size"] == len(vocab)
    return data
