"""How txl-prepare scales with the corpus: tokens/s and peak resident memory per process.

    python bench/prepare_scale.py [--sizes 50 200 800] [--workers 2]
                                  [--modes vocab build bpe bpe-text] [--bpe 32000]
                                  [--bpe-sample-mb 32] [--text FILE ...] [--corpora DIR]

For each size (millions of prepared tokens, ``<S>`` markers included) it generates an
lm1b-shaped corpus (below), then runs ``txl-prepare --dataset lm1b`` on it twice, with the
corpus's ``--vocab`` file and building the vocabulary; mode ``bpe`` writes the same sentences as
JSONL records (10 sentences each, 20 train files) and runs ``txl-prepare --dataset jsonl
--tokenizer bpe:N --bpe-sample-bytes S``, training the BPE on a sample of S bytes of the train
split and encoding with it (its tokens are BPE tokens). Mode ``bpe-text`` does the same with
real text: the non-blank lines (paragraphs) of the ``--text`` files as JSONL records, repeated in
order until the size (in words), so its words are real ones, but no more distinct than those
files hold (the tokenizer's cache hits more often than on a corpus of that size). Each run
is a separate process tree whose resident memory is sampled every 50 ms: it prints wall time,
tokens/s, CPU time per token (all processes; on a shared machine 2e9 / that is what 2 free cores
would do), and peak memory: the main process's resident set (RSS), the largest worker's unique
set (USS) and main RSS + workers' USS at one moment. Workers are forked from the main process,
so their RSS also counts the pages they share with it (a vocabulary or counts table held before
the fork): summing RSS would count those twice, and a worker's RSS would follow what the main
process held when it forked. With ``bpe:N`` the process that trains the tokenizer is one of the
workers. Last, per mode, how much each peak grew from the first size to the last.

The corpus (seeded; the same arguments give the same bytes): 100 training files
``news.en-000NN-of-00100`` and a held-out file ``news.en.heldout-00000-of-00050`` (1/100 of the
size), one sentence per line. Words are drawn from a Zipf law (exponent 1) over 2M types; a type
of rank r is the base-26 letters of r plus "qz" (frequent words are short, ~5.7 bytes per word
with its space, like lm1b's 5.4). Sentence lengths are 1 + Gamma(2.5, 10) words (mean 26, as in
lm1b). The vocabulary file lists ``<S>``, ``</S>``, ``<UNK>`` and the 793,471 most probable
types (the size of lm1b's ``1b_word_vocab.txt``), ``word count`` per line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

TYPES = 2_000_000
VOCAB_WORDS = 793_471
TRAIN_FILES = 100
TOKENS_PER_BLOCK = 1 << 21  # generated at a time, to bound the generator's own memory
JSONL_FILES = 20
SENTENCES_PER_RECORD = 10
MODES = ("vocab", "build", "bpe", "bpe-text")


def type_table(types: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flat bytes of every type followed by a space, start offsets, lengths with the space)."""
    words = []
    for r in range(types):
        letters = []
        while True:
            r, d = divmod(r, 26)
            letters.append(chr(97 + d))
            if r == 0:
                break
        words.append("".join(letters) + "qz ")
    lengths = np.array([len(w) for w in words], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.frombuffer("".join(words).encode(), np.uint8), starts, lengths


class CorpusWriter:
    """Seeded sentences of Zipf words, written as text."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.flat, self.starts, self.lengths = type_table(TYPES)
        weights = 1.0 / np.arange(1, TYPES + 1)
        self.cdf = np.cumsum(weights) / weights.sum()

    def write(self, path: Path, tokens: int) -> int:
        """Whole sentences until about ``tokens`` prepared tokens; returns the tokens written."""
        written = 0
        with path.open("wb") as f:
            while written < tokens:
                block = self.block(min(TOKENS_PER_BLOCK, tokens - written))
                f.write(block[0])
                written += block[1]
        return written

    def block(self, tokens: int) -> tuple[bytes, int]:
        """Text of sentences holding about ``tokens`` tokens (2 markers per sentence)."""
        n_sent = max(1, round(tokens / 28))
        sent_len = 1 + self.rng.gamma(2.5, 10.0, n_sent).astype(np.int64)
        ids = np.searchsorted(self.cdf, self.rng.random(int(sent_len.sum())), side="right")
        ids = np.minimum(ids, TYPES - 1)
        lens = self.lengths[ids]
        out_end = np.cumsum(lens)
        # Byte i of the output comes from flat[starts[id] + (i - out_start)]: one gather.
        shift = np.repeat(self.starts[ids] - (out_end - lens), lens)
        text = self.flat[shift + np.arange(int(out_end[-1]))]
        text[out_end[np.cumsum(sent_len) - 1] - 1] = ord("\n")
        return text.tobytes(), int(sent_len.sum() + 2 * n_sent)

    def vocab(self, path: Path) -> None:
        """The most probable types in lm1b's vocabulary file layout."""
        words = self.flat.tobytes().decode().split()[:VOCAB_WORDS]
        counts = np.round(1e9 / np.arange(1, VOCAB_WORDS + 1)).astype(np.int64)
        lines = ["<S> 0", "</S> 0", "<UNK> 0"] + [f"{w} {c}" for w, c in zip(words, counts)]
        path.write_text("\n".join(lines) + "\n")


def make_corpus(root: Path, tokens: int, seed: int = 0) -> int:
    """An lm1b-shaped corpus of about ``tokens`` train tokens under ``root``; returns them."""
    root.mkdir(parents=True, exist_ok=True)
    writer = CorpusWriter(seed)
    per_file = tokens // TRAIN_FILES
    total = 0
    for i in range(TRAIN_FILES):
        total += writer.write(root / f"news.en-{i + 1:05d}-of-00100", per_file)
    writer.write(root / "news.en.heldout-00000-of-00050", max(per_file // 100, 1000))
    writer.vocab(root / "1b_word_vocab.txt")
    return total


def jsonl_files(root: Path, words: int) -> list[tuple[Path, int]]:
    """(path, words) of JSONL_FILES train files sharing ``words`` and of a valid file of 1/100
    of that, under ``root``; their directories made."""
    train = root / "train"
    files = [(train / f"part-{i:03d}.jsonl", words // JSONL_FILES) for i in range(JSONL_FILES)]
    files.append((root / "valid" / "heldout.jsonl", max(words // 100, 1000)))
    for path, _ in files:
        path.parent.mkdir(parents=True, exist_ok=True)
    return files


def make_jsonl_corpus(root: Path, tokens: int, seed: int = 0) -> None:
    """The same sentences as JSONL records under ``root``: ``train/`` holds JSONL_FILES files
    of about ``tokens`` words in all, ``valid/`` one of 1/100 of that."""
    writer = CorpusWriter(seed)
    for path, words in jsonl_files(root, tokens):
        with path.open("w", encoding="utf-8") as f:
            while words > 0:
                text, n = writer.block(min(TOKENS_PER_BLOCK, words))
                lines = text.decode().splitlines()
                for a in range(0, len(lines), SENTENCES_PER_RECORD):
                    f.write(json.dumps({"text": "\n".join(lines[a : a + SENTENCES_PER_RECORD])}))
                    f.write("\n")
                words -= n


def make_text_jsonl(root: Path, words: int, texts: list[Path]) -> None:
    """The paragraphs of ``texts`` as JSONL records, repeated, under ``root``: ``train/`` holds
    JSONL_FILES files of about ``words`` words in all, ``valid/`` one of 1/100 of that."""
    paragraphs = [
        line.strip() for path in texts for line in path.read_text(encoding="utf-8").splitlines()
    ]
    records = itertools.cycle(
        [(json.dumps({"text": p}) + "\n", len(p.split())) for p in paragraphs if p]
    )
    for path, left in jsonl_files(root, words):
        with path.open("w", encoding="utf-8") as f:
            while left > 0:
                line, n = next(records)
                f.write(line)
                left -= n


@dataclass
class Peaks:
    """Peak resident memory seen while a command ran, in bytes."""

    main: int = 0
    """RSS of the process started (txl-prepare's main process)."""
    worker: int = 0
    """USS of the largest of its descendants."""
    total: int = 0
    """Main RSS plus the descendants' USS, at one moment."""


def run_sampled(cmd: list[str], interval: float = 0.05) -> tuple[float, float, Peaks, str]:
    """(seconds, CPU seconds of all its processes, memory peaks, output) of a command; its
    process tree is sampled every ``interval``."""
    start, cpu = time.perf_counter(), children_cpu()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root, peaks = psutil.Process(proc.pid), Peaks()
    while proc.poll() is None:
        try:
            main = root.memory_info().rss
            workers = [c.memory_full_info().uss for c in root.children(recursive=True)]
        except psutil.Error:  # a process ended between listing and reading
            continue
        peaks.main = max(peaks.main, main)
        peaks.worker = max([peaks.worker, *workers])
        peaks.total = max(peaks.total, main + sum(workers))
        time.sleep(interval)
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out}")
    return time.perf_counter() - start, children_cpu() - cpu, peaks, out


def children_cpu() -> float:
    """User + system seconds of every finished descendant (workers count via their parent)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 800], help="M tokens")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=["vocab", "build", "bpe"], choices=MODES)
    p.add_argument("--bpe", type=int, default=32000, help="BPE vocabulary size (modes bpe*)")
    p.add_argument(
        "--bpe-sample-mb", type=int, default=32, help="MiB of the train split the BPE learns from"
    )
    p.add_argument("--text", type=Path, nargs="+", help="real text files (mode bpe-text)")
    p.add_argument("--corpora", type=Path, help="keep generated corpora here (reused if there)")
    args = p.parse_args()
    if "bpe-text" in args.modes and not args.text:
        p.error("mode bpe-text needs --text FILE ... (e.g. WikiText-103's wiki.train.tokens)")
    with tempfile.TemporaryDirectory() as tmp:
        corpora = args.corpora or Path(tmp)
        print("| corpus | text | vocabulary | wall s | tokens/s | CPU ns/token | main RSS "
              "| largest worker USS | main RSS + workers' USS |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        peaks: dict[str, list[Peaks]] = {mode: [] for mode in args.modes}
        for size in args.sizes:
            for mode in args.modes:
                src = corpus(corpora, size, KINDS[mode], args.text)
                row, peak = measure(
                    src, Path(tmp) / "out", mode, args.workers, args.bpe, args.bpe_sample_mb
                )
                print(row, flush=True)
                peaks[mode].append(peak)
                shutil.rmtree(Path(tmp) / "out")
        for mode, seen in peaks.items():
            print(f"{mode}: peak memory at the largest size against the smallest: {growth(seen)}")


def growth(peaks: list[Peaks]) -> str:
    """How much each peak grew from the first run to the last, e.g. ``main RSS +2%, ...``."""
    first, last = peaks[0], peaks[-1]
    names = {"main": "main RSS", "worker": "largest worker USS", "total": "main RSS + workers' USS"}
    return ", ".join(
        f"{name} {getattr(last, key) / getattr(first, key) - 1:+.0%}" for key, name in names.items()
    )


KINDS = {"vocab": "lm1b", "build": "lm1b", "bpe": "jsonl", "bpe-text": "text-jsonl"}


def corpus(corpora: Path, size: int, kind: str, texts: list[Path] | None) -> Path:
    """The generated corpus of ``size`` M tokens (``lm1b`` files, ``jsonl`` records of the same
    sentences, or ``text-jsonl`` records of real text)."""
    src = corpora / f"{kind}-{size}M"
    if not (src / ".done").exists():
        if kind == "text-jsonl":
            make_text_jsonl(src, size * 1_000_000, texts)
        else:
            (make_jsonl_corpus if kind == "jsonl" else make_corpus)(src, size * 1_000_000)
        (src / ".done").touch()
    return src


VOCABULARY = {"vocab": "--vocab", "build": "built", "bpe": "BPE trained", "bpe-text": "BPE trained"}
TEXT = {
    "vocab": "synthetic",
    "build": "synthetic",
    "bpe": "synthetic",
    "bpe-text": "real, repeated",
}


def measure(
    src: Path, out: Path, mode: str, workers: int, bpe: int, sample_mb: int
) -> tuple[str, Peaks]:
    """One txl-prepare run: its table row, and its memory peaks."""
    dataset = "lm1b" if KINDS[mode] == "lm1b" else "jsonl"
    cmd = [sys.executable, "-m", "data_pipeline", "--dataset", dataset, "--source",
           str(src), "--out", str(out), "--no-progress", "--workers", str(workers)]  # fmt: skip
    if mode == "vocab":
        cmd += ["--vocab", str(src / "1b_word_vocab.txt")]
    if dataset == "jsonl":
        cmd += ["--tokenizer", f"bpe:{bpe}", "--bpe-sample-bytes", str(sample_mb << 20)]
    seconds, cpu, peaks, text = run_sampled(cmd)
    tokens = sum(int(n) for n in re.findall(r"^\w+: (\d+) tokens", text, re.M))
    gb = 1 << 30
    row = (
        f"| {tokens / 1e6:.0f}M tokens | {TEXT[mode]} | {VOCABULARY[mode]} | {seconds:.0f} | "
        f"{tokens / seconds / 1e6:.2f}M | {cpu / tokens * 1e9:.0f} | {peaks.main / gb:.3f} GB | "
        f"{peaks.worker / gb:.3f} GB | {peaks.total / gb:.3f} GB |"
    )
    return row, peaks


if __name__ == "__main__":
    main()
