"""How close a mix's realized token shares stay to its weights, step by step, over seeds.

    python bench/mix_shares.py [--data ../shared/data] [--out runs/bench-mix]
                               [--weights 0.7 0.3] [--rows 8 32] [--tgt-len 64] [--steps 1000]
                               [--seeds 16] [--first-seed 0] [--at 20 60 100 300 1000]
                               [--log-interval 20] [--resample 1]

The mix (made under --out from the shared data, once): ``long``, WikiText-103's articles
(about 5,600 tokens each, heavy-tailed: a tenth under 1,200, a tenth over 12,600) with a
byte-level BPE of 2,000 trained on them, and ``short``, One Billion Word's sentences, 18 to a
document (about 900 tokens), with that tokenizer, mixed w / 1 - w for each w of --weights (0.7:
long documents against short ones, 0.3: short against long). The stream alone (no model) is
read for --steps batches of r rows x --tgt-len tokens for each r of --rows (8 x 64 is the tiny
config's) and each of --seeds seeds. Printed per case: at each --at step, the long corpus's
share of the tokens drawn so far, its mean over the seeds and over each group of 8 seeds, its
spread (standard deviation; the mean's standard error; lowest, highest); whether the mean over
seeds stays within 2 points of the weight at every step a training line logs (every
--log-interval steps, the tiny config's 20) up to --steps, and the step where it strays most;
then from the step where every row has read three mean long documents on, how many seeds stay
within 3 points of the weight at every step. Seeds are --first-seed on, --seeds of them, each
a run of its own (its rows' starts are drawn from it); seeds other than the acceptance's 0 to
15 check that a mean is not theirs alone.

--resample K > 1 makes both corpora K times as many documents, drawn with replacement (seeded)
from the real ones, with the first's tokenizer: lengths drawn from the real lengths (all the
schedule sees of a document; 16 times: a mean article of 5,457 tokens against 5,630), in
corpora where 1,000 steps of 32 rows reach no share's end. The real
articles fill a 32-row share with about 5 of them, which rows read to its end and start over.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from pathlib import Path

from data_pipeline import load_manifest, manifest_url, prepare
from data_pipeline.streams import MixedStreams, MixSource

LAYOUT = {"sample_size": 5_000, "shard_size": 50_000, "progress": False}
SENTENCES_PER_DOCUMENT = 18


def articles(path: Path) -> list[str]:
    """A WikiText file's articles, each one document (from its title line to the next)."""
    found: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith(" = ") and not line.startswith(" = = "):
            found.append([])
        if found:
            found[-1].append(line)
    return ["".join(lines) for lines in found]


def news_documents(path: Path) -> list[str]:
    """One Billion Word's sentences, SENTENCES_PER_DOCUMENT to a document."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    n = SENTENCES_PER_DOCUMENT
    return ["".join(lines[k : k + n]) for k in range(0, len(lines), n)]


def write_jsonl(path: Path, documents: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents), encoding="utf-8")


def sources(data: Path) -> dict[str, list[str]]:
    """The documents of ``long`` and ``short``."""
    return {
        "long": articles(data / "wikitext-103" / "wiki.train.tokens"),
        "short": news_documents(data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"),
    }


def long_and_short(data: Path, out: Path) -> dict[str, Path]:
    """The prepared corpora ``long`` and ``short`` under ``out`` (made if missing)."""
    roots = {name: out / name for name in ("long", "short")}
    if all((root / "train" / "manifest.json").exists() for root in roots.values()):
        return roots
    for name, documents in sources(data).items():
        write_jsonl(out / "src" / name / "train" / "docs.jsonl", documents)
    tokenizers = {"long": "bpe:2000", "short": str(roots["long"] / "tokenizer.json")}
    for name, tokenizer in tokenizers.items():
        prepare("jsonl", str(roots[name]), str(out / "src" / name), tokenizer=tokenizer, **LAYOUT)
    return roots


def resampled(data: Path, out: Path, times: int) -> dict[str, Path]:
    """``long`` and ``short`` with ``times`` as many documents drawn with replacement from the
    real ones (seed 0), under ``out``/resample-``times`` (made if missing), with the tokenizer
    of ``out``'s ``long``."""
    tokenizer = long_and_short(data, out)["long"] / "tokenizer.json"
    here = out / f"resample-{times}"
    roots = {name: here / name for name in ("long", "short")}
    if all((root / "train" / "manifest.json").exists() for root in roots.values()):
        return roots
    rng = random.Random(0)
    for name, documents in sources(data).items():
        drawn = rng.choices(documents, k=times * len(documents))
        write_jsonl(here / "src" / name / "train" / "docs.jsonl", drawn)
        prepare(
            "jsonl", str(roots[name]), str(here / "src" / name), tokenizer=str(tokenizer), **LAYOUT
        )
    return roots


def mix_of(roots: dict[str, Path], weight: float) -> list[MixSource]:
    """``long`` at ``weight``, ``short`` at the rest."""
    weights = {"long": weight, "short": 1 - weight}
    return [MixSource(n, manifest_url(str(roots[n]), "train"), weights[n]) for n in roots]


def long_shares(stream: MixedStreams, steps: int) -> list[float]:
    """The long corpus's share of the tokens drawn after each of ``steps`` batches."""
    shares = []
    for _ in itertools.islice(stream, steps):
        drawn = stream.mix_tokens()
        shares.append(drawn["long"] / sum(drawn.values()))
    return shares


def report(mix: list[MixSource], weight: float, rows: int, args) -> None:
    """Print one case's shares at the --at steps over the seeds."""
    manifest = load_manifest(mix[0].url)
    mean_long = manifest.tokens / manifest.documents
    runs = [
        long_shares(MixedStreams(mix, rows, args.tgt_len, seed=s), args.steps)
        for s in range(args.first_seed, args.first_seed + args.seeds)
    ]
    print(f"long {weight} / short {1 - weight:.1f}; {rows} rows x {args.tgt_len}")
    last = args.first_seed + args.seeds - 1
    print(f"mean long document {mean_long:,.0f} tokens; seeds {args.first_seed} to {last}")
    means = []
    for step in (s for s in args.at if s <= args.steps):
        shares = [run[step - 1] for run in runs]
        groups = [statistics.mean(shares[k : k + 8]) for k in range(0, len(shares), 8)]
        means.append(statistics.mean(shares))
        sd = statistics.pstdev(shares)
        print(
            f"step {step:4d}: mean {means[-1]:.3f} | means of 8 seeds "
            + " ".join(f"{g:.3f}" for g in groups)
            + f" | sd {sd:.3f} (se {sd / math.sqrt(len(shares)):.3f})"
            + f" min {min(shares):.3f} max {max(shares):.3f}"
        )
    logged = range(args.log_interval, args.steps + 1, args.log_interval)
    every = {step: statistics.mean(run[step - 1] for run in runs) for step in logged}
    worst = max(logged, key=lambda step: abs(every[step] - weight))
    held = abs(every[worst] - weight) <= 0.02
    print(
        f"mean over seeds within 2 points at every {args.log_interval}th step to {args.steps}: "
        f"{'yes' if held else 'no'} (furthest: {every[worst]:.3f} at step {worst})"
    )
    settled = math.ceil(3 * mean_long / args.tgt_len)
    if settled <= args.steps:
        held = sum(all(abs(s - weight) < 0.03 for s in run[settled - 1 :]) for run in runs)
        print(f"within 3 points at every step from {settled} on: {held} of {args.seeds} seeds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=Path("runs/bench-mix"))
    parser.add_argument("--weights", type=float, nargs="+", default=[0.7, 0.3])
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--tgt-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--resample", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=20)
    parser.add_argument("--at", type=int, nargs="+", default=[20, 60, 100, 300, 1000])
    args = parser.parse_args()
    roots = long_and_short(args.data, args.out)
    if args.resample > 1:
        roots = resampled(args.data, args.out, args.resample)
    for weight in args.weights:
        for rows in args.rows:
            report(mix_of(roots, weight), weight, rows, args)


if __name__ == "__main__":
    main()
